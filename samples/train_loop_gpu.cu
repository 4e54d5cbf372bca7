// A training-style loop on device batches: the loader uploads each batch on its own stream, the
// "training step" (a dummy kernel that reads every byte and spins for --step-us microseconds)
// runs on the trainer's stream, ordered after the upload by Batch::WaitOn, with no host-side
// synchronisation per step. Also the measuring harness of scripts/gpu-check.sh.
//
//   train_loop_gpu DATASET_DIR [--epochs N] [--step-us U] [--prefetch P] [--batch B]
//   train_loop_gpu --synthetic DIR [--samples N]    write a uint8 224x224x3 dataset first
//   train_loop_gpu --bandwidth                      H2D bandwidth, pinned vs pageable
//
// Stream and event use, per step:
//   loader->Next(&batch)          // releases the previous batch: records its `released` event
//                                 // on `train` (the stream given to WaitOn), then enqueues this
//                                 // batch's cudaMemcpyAsync on the loader's upload stream
//   batch.WaitOn(train)           // cudaStreamWaitEvent(train, batch.ready_event): no host wait
//   TrainStep<<<..., train>>>     // reads batch.device_data
// The loop never calls cudaStreamSynchronize until the end; the loader keeps the host at most
// prefetch + 1 batches ahead of the GPU (see reader/loader.h).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"
#include "formats/record_codec.h"
#include "reader/cuda_handles.h"
#include "reader/loader.h"

namespace {

// The dummy training step: sums the batch's bytes into *checksum, then spins `spin_cycles`.
__global__ void TrainStep(const uint8_t* data, uint64_t bytes, unsigned long long* checksum,
                          long long spin_cycles) {
  unsigned long long sum = 0;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < bytes;
       i += uint64_t{gridDim.x} * blockDim.x) {
    sum += data[i];
  }
  atomicAdd(checksum, sum);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
  }
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    const kiln::Status s_ = kiln::CudaStatus((call), #call);                             \
    if (!s_.ok()) {                                                                      \
      std::fprintf(stderr, "%s\n", s_.ToString().c_str());                               \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

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
    std::printf("h2d_bandwidth %-8s %.2f GB/s (%d x %zu MiB)\n", use_pinned ? "pinned" : "pageable",
                reps * double(bytes) / Seconds(t) / 1e9, reps, bytes >> 20);
  }
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(dev));
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
    for (size_t p = 0; p < raw.size(); ++p) raw[p] = static_cast<uint8_t>(i * 13 + p);
    char key[32];
    std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(i));
    kiln::Status s = encoder.Encode(raw.data(), raw.size(), static_cast<int64_t>(i % 1000), key,
                                    &record);
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
  uint32_t prefetch = 4, batch_size = 256;
  uint64_t samples = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
    if (a == "--bandwidth") return Bandwidth();
    if (a == "--synthetic") synthetic = next();
    else if (a == "--samples") samples = std::strtoull(next(), nullptr, 10);
    else if (a == "--epochs") epochs = std::atoi(next());
    else if (a == "--step-us") step_us = std::atol(next());
    else if (a == "--prefetch") prefetch = static_cast<uint32_t>(std::atoi(next()));
    else if (a == "--batch") batch_size = static_cast<uint32_t>(std::atoi(next()));
    else dir = a;
  }
  if (!synthetic.empty()) return Synthetic(synthetic, samples);
  if (dir.empty()) {
    std::fprintf(stderr, "usage: %s DATASET_DIR [--epochs N] [--step-us U] [--prefetch P]\n",
                 argv[0]);
    return 2;
  }

  kiln::LoaderOptions options;
  options.batch_size = batch_size;
  options.prefetch = prefetch;
  options.seed = 42;
  options.device = 0;  // falls back to host batches, with a warning, without a GPU
  kiln::Result<std::unique_ptr<kiln::Loader>> loader = kiln::Loader::Open(dir, options);
  if (!loader.ok()) {
    std::fprintf(stderr, "cannot open %s: %s\n", dir.c_str(), loader.status().ToString().c_str());
    return 1;
  }
  if (!(*loader)->device_batches()) {
    std::fprintf(stderr, "no device batches (see the warning above); nothing to train on\n");
    return 1;
  }
  kiln::Result<kiln::CudaStream> train = kiln::CudaStream::Create(0);
  if (!train.ok()) {
    std::fprintf(stderr, "%s\n", train.status().ToString().c_str());
    return 1;
  }
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long spin_cycles = static_cast<long long>(step_us) * clock_khz / 1000;
  unsigned long long* checksum = nullptr;
  CHECK_CUDA(cudaMalloc(&checksum, sizeof(*checksum)));
  CHECK_CUDA(cudaMemsetAsync(checksum, 0, sizeof(*checksum), train->get()));

  uint64_t batches = 0, bytes = 0;
  const auto start = std::chrono::steady_clock::now();
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
      const kiln::Status wait = batch.WaitOn(train->get());  // no host synchronisation
      if (!wait.ok()) {
        std::fprintf(stderr, "%s\n", wait.ToString().c_str());
        return 1;
      }
      TrainStep<<<264, 256, 0, train->get()>>>(static_cast<const uint8_t*>(batch.device_data),
                                                batch.bytes(), checksum, spin_cycles);
      CHECK_CUDA(cudaGetLastError());
      ++batches;
      bytes += batch.bytes();
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(train->get()));
  const double secs = Seconds(start);
  unsigned long long sum = 0;
  CHECK_CUDA(cudaMemcpy(&sum, checksum, sizeof(sum), cudaMemcpyDeviceToHost));
  const kiln::LoaderStats st = (*loader)->stats();
  std::printf("train_loop prefetch=%u batch=%u step_us=%ld: %llu batches in %.3f s, "
              "%.0f samples/s, %.2f GB/s uploaded; consumer waited %.3f s in Next; "
              "step-bound time %.3f s; checksum %llu\n",
              prefetch, batch_size, step_us, static_cast<unsigned long long>(batches), secs,
              double(st.samples) / secs, double(bytes) / secs / 1e9, st.consumer_wait_ns / 1e9,
              batches * step_us / 1e6, sum);
  CHECK_CUDA(cudaFree(checksum));
  return 0;
}
