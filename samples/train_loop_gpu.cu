// A training-style loop on device batches: the loader uploads each batch on its own stream, the
// "training step" (a dummy kernel that reads every byte into a position-weighted checksum and
// spins for --step-us microseconds of GPU time) runs on the trainer's stream, ordered after the
// upload by Batch::WaitOn, with no host-side synchronisation per step (unless
// --sync-every-step). Also the measuring harness of scripts/gpu-check.sh.
//
//   train_loop_gpu DATASET_DIR [--epochs N] [--step-us U] [--prefetch P] [--batch B]
//                  [--threads T] [--host-only] [--sync-every-step] [--verify]
//   train_loop_gpu --synthetic DIR [--samples N]    write a uint8 224x224x3 dataset first
//   train_loop_gpu --bandwidth                      H2D bandwidth, pinned vs pageable
//   train_loop_gpu --kernel-bench                   the fused normalise kernel, fp16 and fp32
//   train_loop_gpu --probe                          exit 0 when a CUDA device is usable
//
// --host-only: the same loop with LoaderOptions::device = -1; the step reads a fixed device
// buffer of the batch's size instead of the upload, so the GPU work is the same and the
// difference in wall time is the cost of the upload. --verify: the host computes the same
// checksum from batch.data while it holds the batch; the run fails (exit 1) when the device's
// differs. Result line (key=value, parsed by gpu-check.sh): wall_s is timed from the return of
// the first batch to the end (pipeline fill excluded), over timed_batches = batches - 1.
//
// Stream and event use, per step:
//   loader->Next(&batch)          // releases the previous batch: records its `released` event
//                                 // on `train` (the stream given to WaitOn), then hands out
//                                 // this batch, whose upload is already enqueued
//   batch.WaitOn(train)           // cudaStreamWaitEvent(train, batch.ready_event): no host wait
//   TrainStep<<<..., train>>>     // reads batch.device_data
// The train stream is created before the loader, so it outlives the batch the loader holds
// (reader/loader.h, "Lifetimes"). The loop never calls cudaStreamSynchronize until the end; the
// loader keeps the host at most prefetch + 1 batches ahead of the GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"
#include "formats/record_codec.h"
#include "reader/augmenter.h"
#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "reader/normalize_kernel.h"

namespace {

__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The weight of byte j in the checksum (the host computes the same in HostChecksum).
__host__ __device__ __forceinline__ unsigned long long Weight(uint64_t j) { return (j & 255) + 1; }

// The dummy training step: adds sum(data[j] * Weight(j)) to *checksum, then spins `spin_ns` of
// GPU time (%globaltimer, so the step lasts as long whatever the SM clock).
__global__ void TrainStep(const uint8_t* data, uint64_t bytes, unsigned long long* checksum,
                          unsigned long long spin_ns) {
  unsigned long long sum = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x) {
    sum += data[i] * Weight(i);
  }
  atomicAdd(checksum, sum);
  if (blockIdx.x == 0 && threadIdx.x == 0 && spin_ns > 0) {
    const unsigned long long start = GlobalTimerNs();
    while (GlobalTimerNs() - start < spin_ns) {
    }
  }
}

unsigned long long HostChecksum(const uint8_t* data, uint64_t bytes) {
  unsigned long long sum = 0;
  for (uint64_t j = 0; j < bytes; ++j) sum += data[j] * Weight(j);
  return sum;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

#define CHECK_CUDA(call)                                     \
  do {                                                       \
    const kiln::Status s_ = kiln::CudaStatus((call), #call); \
    if (!s_.ok()) {                                          \
      std::fprintf(stderr, "%s\n", s_.ToString().c_str());   \
      std::exit(1);                                          \
    }                                                        \
  } while (0)

#define CHECK_OK(expr)                                                \
  do {                                                                \
    const kiln::Status s_ = (expr);                                   \
    if (!s_.ok()) {                                                   \
      std::fprintf(stderr, "%s: %s\n", #expr, s_.ToString().c_str()); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

int Probe() {
  std::string reason;
  if (!kiln::CudaDeviceAvailable(&reason)) {
    std::printf("%s\n", reason.c_str());
    return 1;
  }
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("devices=%d device0=\"%s\" sm=%d.%d memory_gib=%.0f\n", count, prop.name, prop.major,
              prop.minor, double(prop.totalGlobalMem) / (1u << 30));
  return 0;
}

int Bandwidth() {
  const size_t bytes = size_t{256} << 20;
  void* dev = nullptr;
  void* pinned = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, bytes));
  CHECK_CUDA(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault));
  std::vector<uint8_t> pageable(bytes, 1);
  std::memset(pinned, 1, bytes);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int pass = 0; pass < 2; ++pass) {
    const bool use_pinned = pass == 0;
    const void* src = use_pinned ? pinned : pageable.data();
    CHECK_CUDA(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, s));  // warm up
    CHECK_CUDA(cudaStreamSynchronize(s));
    const int reps = 10;
    const auto t = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      CHECK_CUDA(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::printf("h2d_bandwidth kind=%s gbps=%.2f reps=%d mib=%zu\n",
                use_pinned ? "pinned" : "pageable", reps * double(bytes) / Seconds(t) / 1e9, reps,
                bytes >> 20);
  }
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(dev));
  return 0;
}

// The fused kernel on 256 samples of 256x256x3 uint8, crop 224x224 and flip, fp16 and fp32:
// median of 20 timed launches (events), as GB/s of bytes read plus written.
int KernelBench() {
  const uint32_t n = 256;
  kiln::TensorSchema stored;
  stored.dtype = kiln::DType::kUint8;
  stored.layout = kiln::Layout::kHWC;
  stored.height = 256;
  stored.width = 256;
  stored.channels = 3;
  kiln::AugmentOptions aug;
  aug.crop_height = 224;
  aug.crop_width = 224;
  aug.flip = true;
  std::vector<kiln::AugmentParams> params(n);
  for (uint32_t k = 0; k < n; ++k) params[k] = kiln::DrawAugmentParams(stored, aug, 7, 0, k);
  std::vector<uint8_t> host(uint64_t{n} * stored.sample_bytes());
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  void* in = nullptr;
  CHECK_CUDA(cudaMalloc(&in, host.size()));
  CHECK_CUDA(cudaMemcpy(in, host.data(), host.size(), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (kiln::DType dtype : {kiln::DType::kFloat16, kiln::DType::kFloat32}) {
    kiln::NormalizeOptions no = kiln::ImageNetNormalize();
    no.out_dtype = dtype;
    kiln::Result<std::unique_ptr<kiln::NormalizeKernel>> k =
        kiln::NormalizeKernel::Create(stored, aug, no, n, 7);
    CHECK_OK(k.status());
    void* out = nullptr;
    CHECK_CUDA(cudaMalloc(&out, (*k)->output_bytes(n)));
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int r = 0; r < 25; ++r) {
      CHECK_CUDA(cudaEventRecord(a, s));
      CHECK_OK((*k)->RunRaw(in, n, params.data(), out, s));
      CHECK_CUDA(cudaEventRecord(b, s));
      CHECK_CUDA(cudaEventSynchronize(b));
      float t = 0;
      CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
      if (r >= 5) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double moved = double(n) * 224 * 224 * 3 + double((*k)->output_bytes(n));
    std::printf("kernel dtype=%s median_ms=%.3f gbps=%.1f\n",
                dtype == kiln::DType::kFloat16 ? "fp16" : "fp32", med, moved / med / 1e6);
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    CHECK_CUDA(cudaFree(out));
  }
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFree(in));
  return 0;
}

int Synthetic(const std::string& dir, uint64_t samples) {
  kiln::DatasetWriterOptions wo;
  wo.schema.dtype = kiln::DType::kUint8;
  wo.schema.layout = kiln::Layout::kHWC;
  wo.schema.height = 224;
  wo.schema.width = 224;
  wo.schema.channels = 3;
  kiln::Result<std::unique_ptr<kiln::DatasetWriter>> w = kiln::DatasetWriter::Create(dir, wo);
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
    return 1;
  }
  kiln::RecordEncoder encoder(kiln::Compression{});
  kiln::EncodedRecord record;
  std::vector<uint8_t> raw(wo.schema.sample_bytes());
  for (uint64_t i = 0; i < samples; ++i) {
    for (size_t p = 0; p < raw.size(); ++p) raw[p] = static_cast<uint8_t>(i * 13 + p * 7);
    char key[32];
    std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(i));
    kiln::Status s =
        encoder.Encode(raw.data(), raw.size(), static_cast<int64_t>(i % 1000), key, &record);
    if (s.ok()) s = (*w)->Add(record);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  kiln::Result<kiln::Manifest> m = (*w)->Finish(kiln::Manifest{});
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 1;
  }
  std::printf("wrote %llu samples to %s\n", static_cast<unsigned long long>(samples), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, synthetic;
  int epochs = 2;
  long step_us = 0;
  uint32_t prefetch = 4, batch_size = 256, threads = 0;
  uint64_t samples = 20000;
  bool host_only = false, sync_every_step = false, verify = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
    if (a == "--probe") return Probe();
    if (a == "--bandwidth") return Bandwidth();
    if (a == "--kernel-bench") return KernelBench();
    if (a == "--synthetic")
      synthetic = next();
    else if (a == "--samples")
      samples = std::strtoull(next(), nullptr, 10);
    else if (a == "--epochs")
      epochs = std::atoi(next());
    else if (a == "--step-us")
      step_us = std::atol(next());
    else if (a == "--prefetch")
      prefetch = static_cast<uint32_t>(std::atoi(next()));
    else if (a == "--batch")
      batch_size = static_cast<uint32_t>(std::atoi(next()));
    else if (a == "--threads")
      threads = static_cast<uint32_t>(std::atoi(next()));
    else if (a == "--host-only")
      host_only = true;
    else if (a == "--sync-every-step")
      sync_every_step = true;
    else if (a == "--verify")
      verify = true;
    else
      dir = a;
  }
  if (!synthetic.empty()) return Synthetic(synthetic, samples);
  if (dir.empty()) {
    std::fprintf(stderr, "usage: %s DATASET_DIR [--epochs N] [--step-us U] [--prefetch P]\n",
                 argv[0]);
    return 2;
  }
  std::string reason;
  if (!kiln::CudaDeviceAvailable(&reason)) {
    std::fprintf(stderr, "%s: nothing to train on\n", reason.c_str());
    return 1;
  }
  // Declared before the loader: the stream must outlive the batch the loader holds.
  kiln::Result<kiln::CudaStream> train = kiln::CudaStream::Create(0);
  if (!train.ok()) {
    std::fprintf(stderr, "%s\n", train.status().ToString().c_str());
    return 1;
  }
  kiln::LoaderOptions options;
  options.batch_size = batch_size;
  options.prefetch = prefetch;
  options.num_threads = threads;
  options.seed = 42;
  options.device = host_only ? -1 : 0;
  kiln::Result<std::unique_ptr<kiln::Loader>> loader = kiln::Loader::Open(dir, options);
  if (!loader.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", dir.c_str(), loader.status().ToString().c_str());
    return 1;
  }
  if (!host_only && !(*loader)->device_batches()) {
    std::fprintf(stderr, "no device batches (see the warning above); nothing to train on\n");
    return 1;
  }
  const uint64_t max_batch_bytes = uint64_t{batch_size} * (*loader)->sample_schema().sample_bytes();
  void* fixed = nullptr;  // --host-only: what the step reads instead of an upload
  if (host_only) {
    CHECK_CUDA(cudaMalloc(&fixed, max_batch_bytes));
    CHECK_CUDA(cudaMemsetAsync(fixed, 1, max_batch_bytes, train->get()));
  }
  const unsigned long long spin_ns = static_cast<unsigned long long>(step_us) * 1000;
  unsigned long long* checksum = nullptr;
  CHECK_CUDA(cudaMalloc(&checksum, sizeof(*checksum)));
  CHECK_CUDA(cudaMemsetAsync(checksum, 0, sizeof(*checksum), train->get()));

  uint64_t batches = 0, bytes = 0;
  unsigned long long host_sum = 0;
  auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < epochs; ++epoch) {
    (*loader)->SetEpoch(epoch);
    kiln::Batch batch;
    while (true) {
      kiln::Result<bool> more = (*loader)->Next(&batch);
      if (!more.ok()) {
        std::fprintf(stderr, "%s\n", more.status().ToString().c_str());
        return 1;
      }
      if (!*more) break;
      if (batches == 0) start = std::chrono::steady_clock::now();  // fill excluded
      const void* data = fixed;
      if (!host_only) {
        const kiln::Status wait = batch.WaitOn(train->get());  // no host synchronisation
        if (!wait.ok()) {
          std::fprintf(stderr, "%s\n", wait.ToString().c_str());
          return 1;
        }
        data = batch.device_data;
        if (verify) host_sum += HostChecksum(batch.data, batch.bytes());
      }
      TrainStep<<<264, 256, 0, train->get()>>>(static_cast<const uint8_t*>(data), batch.bytes(),
                                               checksum, spin_ns);
      CHECK_CUDA(cudaPeekAtLastError());
      if (sync_every_step) CHECK_CUDA(cudaStreamSynchronize(train->get()));
      ++batches;
      bytes += batch.bytes();
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(train->get()));
  const double secs = Seconds(start);
  unsigned long long sum = 0;
  CHECK_CUDA(cudaMemcpy(&sum, checksum, sizeof(sum), cudaMemcpyDeviceToHost));
  const kiln::LoaderStats st = (*loader)->stats();
  const uint64_t timed = batches > 0 ? batches - 1 : 0;
  const bool compared = verify && !host_only;
  const bool ok = !compared || sum == host_sum;
  std::printf(
      "train_loop mode=%s prefetch=%u batch=%u threads=%u step_us=%ld sync=%d "
      "pinned=%d batches=%llu timed_batches=%llu wall_s=%.6f samples_per_s=%.0f "
      "gbps=%.2f consumer_wait_s=%.3f step_bound_s=%.3f checksum=%llu "
      "checksum_ok=%s\n",
      host_only ? "host-only" : "upload", prefetch, batch_size, (*loader)->num_threads(), step_us,
      sync_every_step ? 1 : 0, (*loader)->pinned() ? 1 : 0,
      static_cast<unsigned long long>(batches), static_cast<unsigned long long>(timed), secs,
      timed > 0 ? double(st.samples) * timed / batches / secs : 0.0, double(bytes) / secs / 1e9,
      st.consumer_wait_ns / 1e9, timed * step_us / 1e6, sum,
      compared ? (ok ? "yes" : "NO") : "not-compared");
  if (!ok) {
    std::fprintf(stderr, "checksum mismatch: device %llu, host %llu: the uploaded bytes differ\n",
                 sum, host_sum);
  }
  CHECK_CUDA(cudaFree(checksum));
  if (fixed != nullptr) CHECK_CUDA(cudaFree(fixed));
  loader->reset();  // before `train`: the loader's release records on it
  return ok ? 0 : 1;
}
