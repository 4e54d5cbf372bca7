// Device batches (LoaderOptions::device) and the fused normalise kernel, on a real GPU: every
// batch on the device equals the host batch byte for byte, for many batches, several prefetch
// depths and epochs, also when the consumer's GPU work on each batch is much slower than loading
// (the release protocol in reader/loader.h); the kernel's output equals the CPU normalisation of
// the CPU-augmented batch. CTest label `gpu`: every test skips with "no CUDA device: <reason>"
// where no device is usable (and in builds without the CUDA runtime).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "reader/normalize_kernel.h"
#include "tests/reader/device_batch_reference.h"
#include "tests/reader/test_dataset.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

// KILN_REQUIRE_GPU=1 (set by scripts/gpu-check.sh run) turns every skip into a failure, so a
// run on a machine whose GPU is not usable can never pass by skipping.
bool RequireGpu() {
  const char* v = std::getenv("KILN_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

#define KILN_SKIP_OR_FAIL(message)                                               \
  do {                                                                           \
    if (RequireGpu()) {                                                          \
      FAIL() << "KILN_REQUIRE_GPU is set and this test cannot run: " << message; \
    }                                                                            \
    GTEST_SKIP() << message;                                                     \
  } while (0)

#define KILN_SKIP_WITHOUT_DEVICE()                     \
  do {                                                 \
    std::string reason_;                               \
    if (!CudaDeviceAvailable(&reason_)) {              \
      KILN_SKIP_OR_FAIL("no CUDA device: " + reason_); \
    }                                                  \
  } while (0)

#define ASSERT_OK(expr)                                               \
  do {                                                                \
    const Status status_ = (expr);                                    \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.ToString(); \
  } while (0)

LoaderOptions Opts(int device, uint32_t prefetch, bool augment) {
  return testing::DeviceTestOptions(device, /*threads=*/4, prefetch, augment);
}

using HostCopy = testing::HostBatchCopy;
using testing::HostReference;

TestDatasetOptions Dataset() {
  TestDatasetOptions dso;
  dso.num_samples = 301;  // 38 batches of 8 per epoch, the last one partial
  dso.schema = MakeSchema(16, 14, 3);
  return dso;
}

#ifdef KILN_HAVE_CUDA

// Sleeps on the host from inside `stream` (cudaLaunchHostFunc): the stream's later work starts
// `ms` later, as if a long training step ran on it.
void CUDART_CB SleepOnStream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<uintptr_t>(ms)));
}

TEST(GpuUploadTest, DeviceBatchesEqualHostBatches) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok()) << consumer.status().ToString();
  for (uint32_t prefetch : {1u, 2u, 4u}) {
    for (bool augment : {false, true}) {
      SCOPED_TRACE("prefetch " + std::to_string(prefetch) + (augment ? " augment" : ""));
      const std::vector<HostCopy> want = HostReference(ds.dir(), Opts(-1, prefetch, augment), 3);
      Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), Opts(0, prefetch, augment));
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      ASSERT_TRUE((*l)->device_batches());
      size_t k = 0;
      for (uint64_t e = 0; e < 3; ++e) {
        Batch b;
        while (true) {
          Result<bool> r = (*l)->Next(&b);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          if (!*r) break;
          ASSERT_LT(k, want.size());
          ASSERT_NE(b.device_data, nullptr);
          ASSERT_EQ(b.device, 0);
          ASSERT_OK(b.WaitOn(consumer->get()));
          std::vector<uint8_t> data(b.bytes());
          std::vector<int64_t> labels(b.size);
          ASSERT_OK(CudaCopyToHostAsync(data.data(), b.device_data, data.size(), consumer->get()));
          ASSERT_OK(CudaCopyToHostAsync(labels.data(), b.device_labels,
                                        labels.size() * sizeof(int64_t), consumer->get()));
          ASSERT_OK(consumer->Synchronize());
          EXPECT_EQ(data, want[k].data) << "epoch " << e << " batch " << b.index;
          EXPECT_EQ(labels, want[k].labels) << "epoch " << e << " batch " << b.index;
          EXPECT_EQ(std::vector<uint8_t>(b.data, b.data + b.bytes()), want[k].data);
          ++k;
        }
      }
      EXPECT_EQ(k, want.size());
    }
  }
}

// The consumer never synchronises the host with its work: each batch is copied device-to-device
// into its own place only after a long stall on the consumer stream (and read by the fused
// kernel on a second stream: the release must wait for both). If the loader overwrote a
// device buffer (or refilled a host slot under a copy) before the consumer's work on it, the
// saved copies would differ from the reference.
TEST(GpuUploadTest, SlowConsumerSeesEveryBatchIntact) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok()) << consumer.status().ToString();
  for (uint32_t prefetch : {1u, 2u, 4u}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    const LoaderOptions o = Opts(0, prefetch, true);
    const std::vector<HostCopy> want = HostReference(ds.dir(), o, 2);
    ASSERT_FALSE(want.empty());
    const uint64_t batch_bytes =
        uint64_t{o.batch_size} * want[0].data.size() / want[0].labels.size();
    Result<DeviceBuffer> saved = DeviceBuffer::Allocate(want.size() * batch_bytes);
    Result<DeviceBuffer> saved_labels =
        DeviceBuffer::Allocate(want.size() * o.batch_size * sizeof(int64_t));
    ASSERT_TRUE(saved.ok() && saved_labels.ok());
    Result<CudaStream> side = CudaStream::Create(0);
    ASSERT_TRUE(side.ok()) << side.status().ToString();
    std::unique_ptr<NormalizeKernel> busy;  // a real kernel reading the batch, when built
    Result<DeviceBuffer> busy_out = DeviceBuffer::Allocate(1);
#ifdef KILN_HAVE_CUDA_KERNELS
    {
      NormalizeOptions no;
      Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(
          MakeSchema(12, 10, 3), AugmentOptions{}, no, o.batch_size, o.seed);
      ASSERT_TRUE(nk.ok()) << nk.status().ToString();
      busy = std::move(*nk);
      busy_out = DeviceBuffer::Allocate(busy->output_bytes(o.batch_size));
      ASSERT_TRUE(busy_out.ok());
    }
#endif
    {
      Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      size_t k = 0;
      for (uint64_t e = 0; e < 2; ++e) {
        Batch b;
        while (true) {
          Result<bool> r = (*l)->Next(&b);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          if (!*r) break;
          ASSERT_LT(k, want.size());
          ASSERT_OK(b.WaitOn(consumer->get()));
          ASSERT_EQ(cudaLaunchHostFunc(consumer->get(), SleepOnStream,
                                       reinterpret_cast<void*>(uintptr_t{k % 3 == 0 ? 20u : 4u})),
                    cudaSuccess);
          // The kernel runs on a second stream: its WaitOn adds that stream to the batch's
          // consumers and must not replace `consumer`, whose stalled copies still read it.
          if (busy) ASSERT_OK(busy->Run(b, busy_out->data(), side->get()));
          ASSERT_EQ(
              cudaMemcpyAsync(static_cast<uint8_t*>(saved->data()) + k * batch_bytes, b.device_data,
                              b.bytes(), cudaMemcpyDeviceToDevice, consumer->get()),
              cudaSuccess);
          ASSERT_EQ(cudaMemcpyAsync(static_cast<int64_t*>(saved_labels->data()) + k * o.batch_size,
                                    b.device_labels, b.size * sizeof(int64_t),
                                    cudaMemcpyDeviceToDevice, consumer->get()),
                    cudaSuccess);
          if (k % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          ++k;
        }
      }
      ASSERT_EQ(k, want.size());
    }  // the loader's destructor waits for the consumer's work on its held batch
    ASSERT_OK(consumer->Synchronize());
    std::vector<uint8_t> all(want.size() * batch_bytes);
    std::vector<int64_t> all_labels(want.size() * o.batch_size);
    ASSERT_EQ(cudaMemcpy(all.data(), saved->data(), all.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(all_labels.data(), saved_labels->data(),
                         all_labels.size() * sizeof(int64_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(0,
                std::memcmp(all.data() + k * batch_bytes, want[k].data.data(), want[k].data.size()))
          << "batch " << k;
      EXPECT_EQ(0, std::memcmp(all_labels.data() + k * o.batch_size, want[k].labels.data(),
                               want[k].labels.size() * sizeof(int64_t)))
          << "labels of batch " << k;
    }
  }
}

// The held batch is still read by the consumer after SetEpoch (and, second case, after the
// loader's destruction): a device-to-device copy of it, enqueued behind a 30 ms stall, must see
// the batch's bytes. A SetEpoch that refilled the device buffer without waiting for `released`,
// or a destructor that freed it at once, would change the saved bytes (or fault, which
// compute-sanitizer memcheck reports in scripts/gpu-check.sh).
TEST(GpuUploadTest, SetEpochMidEpochAndDestroyWhileHolding) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok());
  const LoaderOptions o = Opts(0, 2, false);
  const std::vector<HostCopy> want = HostReference(ds.dir(), o, 1);
  ASSERT_GT(want.size(), 8u);
  for (bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "destroy while holding" : "SetEpoch while holding");
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
    ASSERT_TRUE(l.ok());
    Batch b;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*l)->Next(&b).ok());
    const std::vector<uint8_t>& held_want = want[4].data;
    ASSERT_EQ(b.bytes(), held_want.size());
    Result<DeviceBuffer> saved = DeviceBuffer::Allocate(b.bytes());
    ASSERT_TRUE(saved.ok());
    ASSERT_OK(b.WaitOn(consumer->get()));
    ASSERT_EQ(cudaLaunchHostFunc(consumer->get(), SleepOnStream, reinterpret_cast<void*>(30)),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(saved->data(), b.device_data, b.bytes(), cudaMemcpyDeviceToDevice,
                              consumer->get()),
              cudaSuccess);
    if (destroy) {
      l->reset();  // must wait for the stall and the copy before freeing the device buffer
    } else {
      (*l)->SetEpoch(0);  // abandons the held batch; epoch 0 again from batch 0
      // Refill every slot (and upload into every device buffer) while the stall still runs.
      for (size_t k = 0; k < 6; ++k) {
        Result<bool> r = (*l)->Next(&b);
        ASSERT_TRUE(r.ok() && *r);
        EXPECT_EQ(std::vector<uint8_t>(b.data, b.data + b.bytes()), want[k].data);
      }
    }
    ASSERT_OK(consumer->Synchronize());
    std::vector<uint8_t> got(held_want.size());
    ASSERT_EQ(cudaMemcpy(got.data(), saved->data(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(got == held_want) << "the held batch changed under the consumer's copy";
    if (!destroy) {
      // And the batches after SetEpoch are right on the device too.
      (*l)->SetEpoch(0);
      for (size_t k = 0; k < 3; ++k) {
        Result<bool> r = (*l)->Next(&b);
        ASSERT_TRUE(r.ok() && *r);
        ASSERT_OK(b.WaitOn(consumer->get()));
        std::vector<uint8_t> data(b.bytes());
        ASSERT_OK(CudaCopyToHostAsync(data.data(), b.device_data, data.size(), consumer->get()));
        ASSERT_OK(consumer->Synchronize());
        EXPECT_EQ(data, want[k].data) << "batch " << k;
      }
    }
  }
}

// Full size: batches of 256 samples of 224x224x3 uint8 (38.5 MB), prefetch 1 and 4, two
// epochs (the second partial batch included), device bytes equal to a host loader's.
TEST(GpuUploadTest, FullSizeBatchesEqualHostBatches) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDatasetOptions dso;
  dso.num_samples = 600;  // 3 batches of 256 per epoch, the last one of 88
  dso.schema = MakeSchema(224, 224, 3);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok());
  for (uint32_t prefetch : {1u, 4u}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    LoaderOptions o = Opts(0, prefetch, false);
    o.batch_size = 256;
    o.num_threads = 8;
    const std::vector<HostCopy> want = HostReference(ds.dir(), o, 2);
    ASSERT_EQ(want.size(), 6u);
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE((*l)->device_batches());
    size_t k = 0;
    std::vector<uint8_t> data;
    std::vector<int64_t> labels;
    for (uint64_t e = 0; e < 2; ++e) {
      Batch b;
      while (true) {
        Result<bool> r = (*l)->Next(&b);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (!*r) break;
        ASSERT_LT(k, want.size());
        ASSERT_OK(b.WaitOn(consumer->get()));
        data.assign(b.bytes(), 0);
        labels.assign(b.size, 0);
        ASSERT_OK(CudaCopyToHostAsync(data.data(), b.device_data, data.size(), consumer->get()));
        ASSERT_OK(CudaCopyToHostAsync(labels.data(), b.device_labels,
                                      labels.size() * sizeof(int64_t), consumer->get()));
        ASSERT_OK(consumer->Synchronize());
        EXPECT_TRUE(data == want[k].data) << "epoch " << e << " batch " << b.index;
        EXPECT_EQ(labels, want[k].labels) << "epoch " << e << " batch " << b.index;
        ++k;
      }
    }
    EXPECT_EQ(k, want.size());
  }
}

#ifdef KILN_HAVE_CUDA_KERNELS

// The first differing element of two outputs of `elem` bytes each, or -1 when they are equal.
int64_t FirstDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t elem) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += elem) {
    if (std::memcmp(a.data() + i, b.data() + i, elem) != 0) return static_cast<int64_t>(i / elem);
  }
  return -1;
}

// Loader without augment + GPU crop/flip/normalise == loader with CPU augment + CPU normalise.
TEST(GpuUploadTest, FusedKernelMatchesCpuNormalisation) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok());
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    for (uint32_t prefetch : {1u, 4u}) {
      SCOPED_TRACE(std::string(dtype == DType::kFloat16 ? "fp16" : "fp32") + " prefetch " +
                   std::to_string(prefetch));
      const LoaderOptions cpu_aug = Opts(-1, prefetch, true);
      const std::vector<HostCopy> want = HostReference(ds.dir(), cpu_aug, 2);
      LoaderOptions gpu = Opts(0, prefetch, false);
      NormalizeOptions no;
      no.out_dtype = dtype;
      const NormalizeOptions imagenet = ImageNetNormalize();
      for (int c = 0; c < 3; ++c) {
        no.mean[c] = imagenet.mean[c];
        no.std[c] = imagenet.std[c];
      }
      Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), gpu);
      ASSERT_TRUE(l.ok());
      Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(
          (*l)->sample_schema(), cpu_aug.augment, no, gpu.batch_size, gpu.seed);
      ASSERT_TRUE(nk.ok()) << nk.status().ToString();
      const TensorSchema out_schema = (*nk)->output_schema();
      const TensorSchema cropped = MakeSchema(12, 10, 3);
      Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(gpu.batch_size));
      ASSERT_TRUE(out.ok());
      size_t k = 0;
      for (uint64_t e = 0; e < 2; ++e) {
        Batch b;
        while (true) {
          Result<bool> r = (*l)->Next(&b);
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          if (!*r) break;
          ASSERT_LT(k, want.size());
          ASSERT_EQ(std::vector<uint64_t>(b.sample_indices, b.sample_indices + b.size),
                    want[k].ids);
          ASSERT_OK((*nk)->Run(b, out->data(), consumer->get()));
          std::vector<uint8_t> got((*nk)->output_bytes(b.size));
          ASSERT_OK(CudaCopyToHostAsync(got.data(), out->data(), got.size(), consumer->get()));
          ASSERT_OK(consumer->Synchronize());
          std::vector<uint8_t> ref(got.size());
          for (uint32_t s = 0; s < b.size; ++s) {
            NormalizeSampleOnHost(want[k].data.data() + s * cropped.sample_bytes(), cropped, no,
                                  dtype, ref.data() + s * out_schema.sample_bytes());
          }
          const int64_t at = FirstDifference(got, ref, DTypeSize(dtype));
          ASSERT_EQ(at, -1) << "batch " << k << ": first differing element " << at;
          ++k;
        }
      }
      EXPECT_EQ(k, want.size());
    }
  }
}

// RandomResizedCrop through Run: loader without augment + GPU RRC/flip/normalise == loader with
// the same RRC on the CPU + CPU normalise, two epochs (Run draws each sample's box from the
// loader's seed, the batch's epoch and sample indices, as the CPU loader does).
TEST(GpuUploadTest, FusedKernelResizedCropMatchesCpuLoader) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok());
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    SCOPED_TRACE(dtype == DType::kFloat16 ? "fp16" : "fp32");
    LoaderOptions cpu_aug = Opts(-1, 2, true);
    cpu_aug.augment = AugmentOptions{};
    cpu_aug.augment.resize_height = 20;  // stored 16x14: upsampling and downsampling boxes
    cpu_aug.augment.resize_width = 11;
    cpu_aug.augment.scale_min = 0.1;
    cpu_aug.augment.flip = true;
    const std::vector<HostCopy> want = HostReference(ds.dir(), cpu_aug, 2);
    LoaderOptions gpu = Opts(0, 2, false);
    NormalizeOptions no = ImageNetNormalize();
    no.out_dtype = dtype;
    Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), gpu);
    ASSERT_TRUE(l.ok());
    Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(
        (*l)->sample_schema(), cpu_aug.augment, no, gpu.batch_size, gpu.seed);
    ASSERT_TRUE(nk.ok()) << nk.status().ToString();
    const TensorSchema out_schema = (*nk)->output_schema();
    ASSERT_EQ(out_schema.height, 20u);
    ASSERT_EQ(out_schema.width, 11u);
    const TensorSchema resized = MakeSchema(20, 11, 3);
    Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(gpu.batch_size));
    ASSERT_TRUE(out.ok());
    size_t k = 0;
    for (uint64_t e = 0; e < 2; ++e) {
      Batch b;
      while (true) {
        Result<bool> r = (*l)->Next(&b);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        if (!*r) break;
        ASSERT_LT(k, want.size());
        ASSERT_EQ(std::vector<uint64_t>(b.sample_indices, b.sample_indices + b.size), want[k].ids);
        ASSERT_OK((*nk)->Run(b, out->data(), consumer->get()));
        std::vector<uint8_t> got((*nk)->output_bytes(b.size));
        ASSERT_OK(CudaCopyToHostAsync(got.data(), out->data(), got.size(), consumer->get()));
        ASSERT_OK(consumer->Synchronize());
        std::vector<uint8_t> ref(got.size());
        for (uint32_t s = 0; s < b.size; ++s) {
          NormalizeSampleOnHost(want[k].data.data() + s * resized.sample_bytes(), resized, no,
                                dtype, ref.data() + s * out_schema.sample_bytes());
        }
        const int64_t at = FirstDifference(got, ref, DTypeSize(dtype));
        ASSERT_EQ(at, -1) << "batch " << k << ": first differing element " << at;
        ++k;
      }
    }
    EXPECT_EQ(k, want.size());
  }
}

// Full size: 256 samples of 256x256x3, crop 224x224 and flip drawn per sample (38.5M output
// elements: the grid-stride loop runs, blocks capped at 65535), fp32 and fp16 bit-exact against
// the host reference (ApplyAugment + NormalizeSampleOnHost, FloatToHalfBits for fp16).
TEST(GpuUploadTest, FusedKernelFullSizeBitExact) {
  KILN_SKIP_WITHOUT_DEVICE();
  const uint32_t n = 256;
  const TensorSchema stored = MakeSchema(256, 256, 3);
  AugmentOptions aug;
  aug.crop_height = 224;
  aug.crop_width = 224;
  aug.flip = true;
  Result<TensorSchema> cropped = AugmentedSchema(stored, aug);
  ASSERT_TRUE(cropped.ok());
  std::vector<AugmentParams> params(n);
  uint32_t flips = 0;
  for (uint32_t k = 0; k < n; ++k) {
    params[k] = DrawAugmentParams(stored, aug, 99, 1, k);
    flips += params[k].flip ? 1 : 0;
  }
  ASSERT_GT(flips, 0u);
  ASSERT_LT(flips, n);
  std::vector<uint8_t> host(uint64_t{n} * stored.sample_bytes());
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint8_t& v : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint8_t>(x >> 32);
  }
  Result<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  Result<DeviceBuffer> in = DeviceBuffer::Allocate(host.size());
  ASSERT_TRUE(in.ok());
  ASSERT_EQ(cudaMemcpy(in->data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<uint8_t> crop(cropped->sample_bytes());
  for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
    SCOPED_TRACE(dtype == DType::kFloat16 ? "fp16" : "fp32");
    NormalizeOptions no = ImageNetNormalize();
    no.out_dtype = dtype;
    Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(stored, aug, no, n, 99);
    ASSERT_TRUE(nk.ok()) << nk.status().ToString();
    const TensorSchema out_schema = (*nk)->output_schema();
    Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(n));
    ASSERT_TRUE(out.ok());
    ASSERT_OK((*nk)->RunRaw(in->data(), n, params.data(), out->data(), stream->get()));
    std::vector<uint8_t> got((*nk)->output_bytes(n));
    ASSERT_OK(CudaCopyToHostAsync(got.data(), out->data(), got.size(), stream->get()));
    ASSERT_OK(stream->Synchronize());
    std::vector<uint8_t> ref(got.size());
    for (uint32_t k = 0; k < n; ++k) {
      ApplyAugment(host.data() + uint64_t{k} * stored.sample_bytes(), stored, params[k], *cropped,
                   crop.data());
      NormalizeSampleOnHost(crop.data(), *cropped, no, dtype,
                            ref.data() + uint64_t{k} * out_schema.sample_bytes());
    }
    const int64_t at = FirstDifference(got, ref, DTypeSize(dtype));
    ASSERT_EQ(at, -1) << "first differing element " << at << " (sample "
                      << at / (out_schema.sample_bytes() / DTypeSize(dtype)) << ")";
  }
  // A crop outside the stored sample is refused before anything is launched.
  NormalizeOptions no = ImageNetNormalize();
  Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(stored, aug, no, n, 99);
  ASSERT_TRUE(nk.ok());
  Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(1));
  ASSERT_TRUE(out.ok());
  AugmentParams bad;
  bad.top = 33;
  const Status refused = (*nk)->RunRaw(in->data(), 1, &bad, out->data(), stream->get());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
}

// RandomResizedCrop (bilinear) and the center crop in the kernel: 160 samples of 61x83x3, boxes
// drawn by DrawAugmentParams (many sizes, so both down- and upsampling taps), output 48x56
// (RandomResizedCrop, scale [0.05, 1]) and 40x40 (center crop), flip drawn per sample (both
// seen), fp32 and fp16: the kernel's bytes equal NormalizeAugmentedSampleOnHost's (the CPU
// augmenter's ResizeCropBilinear, then the CPU normalisation) exactly (RunRaw). A box outside
// the sample, or an area-resize parameter, is refused before a launch.
TEST(GpuUploadTest, FusedKernelResizedCropBitExact) {
  KILN_SKIP_WITHOUT_DEVICE();
  const uint32_t n = 160;
  const TensorSchema stored = MakeSchema(61, 83, 3);
  std::vector<uint8_t> host(uint64_t{n} * stored.sample_bytes());
  uint64_t x = 0x243f6a8885a308d3ull;
  for (uint8_t& v : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint8_t>(x >> 32);
  }
  Result<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  Result<DeviceBuffer> in = DeviceBuffer::Allocate(host.size());
  ASSERT_TRUE(in.ok());
  ASSERT_EQ(cudaMemcpy(in->data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  AugmentOptions rrc;
  rrc.resize_height = 48;
  rrc.resize_width = 56;
  rrc.scale_min = 0.05;
  rrc.flip = true;
  AugmentOptions center;
  center.center_crop_height = 40;
  center.center_crop_width = 40;
  center.flip = true;
  for (const AugmentOptions& aug : {rrc, center}) {
    SCOPED_TRACE(aug.resized_crop() ? "RandomResizedCrop" : "center crop");
    std::vector<AugmentParams> params(n);
    uint32_t flips = 0, upsampled = 0;
    for (uint32_t k = 0; k < n; ++k) {
      params[k] = DrawAugmentParams(stored, aug, 7, 2, k);
      ASSERT_NE(params[k].box_height, 0u);
      flips += params[k].flip ? 1 : 0;
      upsampled += params[k].box_height < (aug.resized_crop() ? 48u : 40u) ? 1 : 0;
    }
    ASSERT_GT(flips, 0u);
    ASSERT_LT(flips, n);
    if (aug.resized_crop()) {
      ASSERT_GT(upsampled, 0u);
    }
    for (DType dtype : {DType::kFloat32, DType::kFloat16}) {
      SCOPED_TRACE(dtype == DType::kFloat16 ? "fp16" : "fp32");
      NormalizeOptions no = ImageNetNormalize();
      no.out_dtype = dtype;
      Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(stored, aug, no, n, 7);
      ASSERT_TRUE(nk.ok()) << nk.status().ToString();
      const TensorSchema out_schema = (*nk)->output_schema();
      Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(n));
      ASSERT_TRUE(out.ok());
      ASSERT_OK((*nk)->RunRaw(in->data(), n, params.data(), out->data(), stream->get()));
      std::vector<uint8_t> got((*nk)->output_bytes(n));
      ASSERT_OK(CudaCopyToHostAsync(got.data(), out->data(), got.size(), stream->get()));
      ASSERT_OK(stream->Synchronize());
      std::vector<uint8_t> ref(got.size());
      for (uint32_t k = 0; k < n; ++k) {
        NormalizeAugmentedSampleOnHost(host.data() + uint64_t{k} * stored.sample_bytes(), stored,
                                       params[k], out_schema, no, dtype,
                                       ref.data() + uint64_t{k} * out_schema.sample_bytes());
      }
      const int64_t at = FirstDifference(got, ref, DTypeSize(dtype));
      ASSERT_EQ(at, -1) << "first differing element " << at << " (sample "
                        << at / (out_schema.sample_bytes() / DTypeSize(dtype)) << ")";
    }
  }
  NormalizeOptions no = ImageNetNormalize();
  Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(stored, rrc, no, n, 7);
  ASSERT_TRUE(nk.ok());
  Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(1));
  ASSERT_TRUE(out.ok());
  AugmentParams bad;
  bad.top = 10;
  bad.box_height = 52;  // 10 + 52 > 61
  bad.box_width = 20;
  const Status refused = (*nk)->RunRaw(in->data(), 1, &bad, out->data(), stream->get());
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  bad.box_height = 40;
  bad.area = true;  // the kernel does not do the area resize
  const Status area = (*nk)->RunRaw(in->data(), 1, &bad, out->data(), stream->get());
  EXPECT_EQ(area.code(), StatusCode::kInvalidArgument) << area.ToString();
}

// Successive calls reuse the pinned parameter staging slots: four batches in a row on one
// stream, each with its own crops and flips, synchronised only at the end, each equal to its own
// host reference (a slot refilled under an in-flight copy would give a batch another's crops).
TEST(GpuUploadTest, FusedKernelBackToBackCallsKeepTheirParameters) {
  KILN_SKIP_WITHOUT_DEVICE();
  const uint32_t n = 32;
  const uint32_t calls = 4;
  const TensorSchema stored = MakeSchema(64, 64, 3);
  AugmentOptions aug;
  aug.crop_height = 48;
  aug.crop_width = 40;
  aug.flip = true;
  Result<TensorSchema> cropped = AugmentedSchema(stored, aug);
  ASSERT_TRUE(cropped.ok());
  std::vector<uint8_t> host(uint64_t{n} * stored.sample_bytes());
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 7);
  Result<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  Result<DeviceBuffer> in = DeviceBuffer::Allocate(host.size());
  ASSERT_TRUE(in.ok());
  ASSERT_EQ(cudaMemcpy(in->data(), host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  const NormalizeOptions no = ImageNetNormalize();
  Result<std::unique_ptr<NormalizeKernel>> nk = NormalizeKernel::Create(stored, aug, no, n, 7);
  ASSERT_TRUE(nk.ok()) << nk.status().ToString();
  const TensorSchema out_schema = (*nk)->output_schema();
  std::vector<std::vector<AugmentParams>> params(calls, std::vector<AugmentParams>(n));
  std::vector<DeviceBuffer> outs;
  for (uint32_t c = 0; c < calls; ++c) {
    for (uint32_t k = 0; k < n; ++k) params[c][k] = DrawAugmentParams(stored, aug, 7, c, k);
    Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(n));
    ASSERT_TRUE(out.ok());
    ASSERT_OK((*nk)->RunRaw(in->data(), n, params[c].data(), out->data(), stream->get()));
    outs.push_back(std::move(*out));
  }
  ASSERT_OK(stream->Synchronize());
  std::vector<uint8_t> crop(cropped->sample_bytes());
  for (uint32_t c = 0; c < calls; ++c) {
    SCOPED_TRACE("call " + std::to_string(c));
    std::vector<uint8_t> got((*nk)->output_bytes(n));
    ASSERT_EQ(cudaMemcpy(got.data(), outs[c].data(), got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<uint8_t> ref(got.size());
    for (uint32_t k = 0; k < n; ++k) {
      ApplyAugment(host.data() + uint64_t{k} * stored.sample_bytes(), stored, params[c][k],
                   *cropped, crop.data());
      NormalizeSampleOnHost(crop.data(), *cropped, no, DType::kFloat32,
                            ref.data() + uint64_t{k} * out_schema.sample_bytes());
    }
    ASSERT_EQ(FirstDifference(got, ref, sizeof(float)), -1);
  }
}

// A batch of more than 2^32 output elements (22 samples of 8192x8192x3, fp16: 4.4 G elements,
// 4.4 GB in, 8.9 GB out): the first and the last sample, which straddles element 2^32, equal
// the host reference, so no input or output offset wraps at 32 bits. The other samples are a
// constant pattern; only the two checked samples are random.
TEST(GpuUploadTest, FusedKernelIndexesPast4GiElements) {
  KILN_SKIP_WITHOUT_DEVICE();
  const uint32_t n = 22;
  const TensorSchema stored = MakeSchema(8192, 8192, 3);
  const uint64_t sample = stored.sample_bytes();
  ASSERT_GT(uint64_t{n} * sample, uint64_t{1} << 32);
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < n * sample * 3 + (uint64_t{1} << 30)) {
    KILN_SKIP_OR_FAIL("needs " + std::to_string(n * sample * 3 >> 20) + " MiB of device memory, " +
                      std::to_string(free_bytes >> 20) + " MiB free");
  }
  Result<DeviceBuffer> in = DeviceBuffer::Allocate(n * sample);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(cudaMemset(in->data(), 0x5a, n * sample), cudaSuccess);
  std::vector<uint8_t> first(sample), last(sample);
  uint64_t x = 0x243f6a8885a308d3ull;
  for (auto* v : {&first, &last}) {
    for (uint8_t& b : *v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x >> 40);
    }
  }
  auto* in_bytes = static_cast<uint8_t*>(in->data());
  ASSERT_EQ(cudaMemcpy(in_bytes, first.data(), sample, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(in_bytes + (n - 1) * sample, last.data(), sample, cudaMemcpyHostToDevice),
            cudaSuccess);
  NormalizeOptions no = ImageNetNormalize();
  no.out_dtype = DType::kFloat16;
  Result<std::unique_ptr<NormalizeKernel>> nk =
      NormalizeKernel::Create(stored, AugmentOptions{}, no, n, 1);
  ASSERT_TRUE(nk.ok()) << nk.status().ToString();
  const uint64_t out_sample = (*nk)->output_schema().sample_bytes();
  Result<DeviceBuffer> out = DeviceBuffer::Allocate((*nk)->output_bytes(n));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<AugmentParams> params(n);
  params[n - 1].flip = true;  // the last sample also reads its rows backwards
  Result<CudaStream> stream = CudaStream::Create(0);
  ASSERT_TRUE(stream.ok());
  ASSERT_OK((*nk)->RunRaw(in->data(), n, params.data(), out->data(), stream->get()));
  ASSERT_OK(stream->Synchronize());
  const auto* out_bytes = static_cast<const uint8_t*>(out->data());
  for (uint32_t k : {0u, n - 1}) {
    SCOPED_TRACE("sample " + std::to_string(k));
    std::vector<uint8_t> got(out_sample), ref(out_sample), flipped(sample);
    ASSERT_EQ(
        cudaMemcpy(got.data(), out_bytes + k * out_sample, out_sample, cudaMemcpyDeviceToHost),
        cudaSuccess);
    ApplyAugment((k == 0 ? first : last).data(), stored, params[k], stored, flipped.data());
    NormalizeSampleOnHost(flipped.data(), stored, no, DType::kFloat16, ref.data());
    ASSERT_EQ(FirstDifference(got, ref, 2), -1);
  }
}

#endif  // KILN_HAVE_CUDA_KERNELS

#else  // !KILN_HAVE_CUDA

TEST(GpuUploadTest, DeviceBatchesEqualHostBatches) {
  KILN_SKIP_WITHOUT_DEVICE();
  FAIL() << "unreachable: a build without the CUDA runtime has no device";
}

#endif  // KILN_HAVE_CUDA

#ifndef KILN_HAVE_CUDA_KERNELS
TEST(GpuUploadTest, FusedKernelMatchesCpuNormalisation) {
  KILN_SKIP_WITHOUT_DEVICE();
  KILN_SKIP_OR_FAIL(
      std::string("no CUDA kernels in this build (nvcc was not found at configure time)"));
}
TEST(GpuUploadTest, FusedKernelResizedCropMatchesCpuLoader) {
  KILN_SKIP_WITHOUT_DEVICE();
  KILN_SKIP_OR_FAIL(
      std::string("no CUDA kernels in this build (nvcc was not found at configure time)"));
}
TEST(GpuUploadTest, FusedKernelResizedCropBitExact) {
  KILN_SKIP_WITHOUT_DEVICE();
  KILN_SKIP_OR_FAIL(
      std::string("no CUDA kernels in this build (nvcc was not found at configure time)"));
}
#endif

}  // namespace
}  // namespace kiln
