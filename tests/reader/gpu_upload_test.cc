// Device batches (LoaderOptions::device) and the fused normalise kernel, on a real GPU: every
// batch on the device equals the host batch byte for byte, for many batches, several prefetch
// depths and epochs, also when the consumer's GPU work on each batch is much slower than loading
// (the release protocol in reader/loader.h); the kernel's output equals the CPU normalisation of
// the CPU-augmented batch. CTest label `gpu`: every test skips with "no CUDA device: <reason>"
// where no device is usable (and in builds without the CUDA runtime).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "reader/normalize_kernel.h"
#include "tests/reader/test_dataset.h"

#ifdef KILN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

#define KILN_SKIP_WITHOUT_DEVICE()                   \
  do {                                               \
    std::string reason_;                             \
    if (!CudaDeviceAvailable(&reason_)) {            \
      GTEST_SKIP() << "no CUDA device: " << reason_; \
    }                                                \
  } while (0)

#define ASSERT_OK(expr)                                               \
  do {                                                                \
    const Status status_ = (expr);                                    \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.ToString(); \
  } while (0)

LoaderOptions Opts(int device, uint32_t prefetch, bool augment) {
  LoaderOptions o;
  o.batch_size = 8;
  o.num_threads = 4;
  o.prefetch = prefetch;
  o.seed = 5;
  o.device = device;
  if (augment) {
    o.augment.crop_height = 12;
    o.augment.crop_width = 10;
    o.augment.flip = true;
  }
  return o;
}

// One host batch's data and labels as bytes.
struct HostCopy {
  std::vector<uint8_t> data;
  std::vector<int64_t> labels;
  std::vector<uint64_t> ids;
  uint64_t epoch = 0;
};

HostCopy CopyHost(const Batch& b) {
  HostCopy c;
  c.data.assign(b.data, b.data + b.bytes());
  c.labels.assign(b.labels, b.labels + b.size);
  c.ids.assign(b.sample_indices, b.sample_indices + b.size);
  c.epoch = b.epoch;
  return c;
}

// All batches of `epochs` epochs of a host loader: the reference.
std::vector<HostCopy> Reference(const std::string& dir, LoaderOptions o, uint64_t epochs) {
  o.device = -1;
  std::vector<HostCopy> out;
  Result<std::unique_ptr<Loader>> l = Loader::Open(dir, o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return out;
  for (uint64_t e = 0; e < epochs; ++e) {
    Batch b;
    while (true) {
      Result<bool> r = (*l)->Next(&b);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok() || !*r) break;
      out.push_back(CopyHost(b));
    }
  }
  return out;
}

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
      const std::vector<HostCopy> want = Reference(ds.dir(), Opts(-1, prefetch, augment), 3);
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
// into its own place only after a long stall on the consumer stream. If the loader overwrote a
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
    const std::vector<HostCopy> want = Reference(ds.dir(), o, 2);
    ASSERT_FALSE(want.empty());
    const uint64_t batch_bytes =
        uint64_t{o.batch_size} * want[0].data.size() / want[0].labels.size();
    Result<DeviceBuffer> saved = DeviceBuffer::Allocate(want.size() * batch_bytes);
    Result<DeviceBuffer> saved_labels =
        DeviceBuffer::Allocate(want.size() * o.batch_size * sizeof(int64_t));
    ASSERT_TRUE(saved.ok() && saved_labels.ok());
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
          if (busy) ASSERT_OK(busy->Run(b, busy_out->data(), consumer->get()));
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

TEST(GpuUploadTest, SetEpochMidEpochAndDestroyWhileHolding) {
  KILN_SKIP_WITHOUT_DEVICE();
  TestDataset ds(Dataset());
  ASSERT_TRUE(ds.ok());
  Result<CudaStream> consumer = CudaStream::Create(0);
  ASSERT_TRUE(consumer.ok());
  const LoaderOptions o = Opts(0, 2, false);
  const std::vector<HostCopy> want = Reference(ds.dir(), o, 1);
  Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), o);
  ASSERT_TRUE(l.ok());
  Batch b;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*l)->Next(&b).ok());
  ASSERT_OK(b.WaitOn(consumer->get()));
  ASSERT_EQ(cudaLaunchHostFunc(consumer->get(), SleepOnStream, reinterpret_cast<void*>(20)),
            cudaSuccess);
  (*l)->SetEpoch(0);  // abandons the held batch; epoch 0 again from batch 0
  for (size_t k = 0; k < 3; ++k) {
    Result<bool> r = (*l)->Next(&b);
    ASSERT_TRUE(r.ok() && *r);
    ASSERT_OK(b.WaitOn(consumer->get()));
    std::vector<uint8_t> data(b.bytes());
    ASSERT_OK(CudaCopyToHostAsync(data.data(), b.device_data, data.size(), consumer->get()));
    ASSERT_OK(consumer->Synchronize());
    EXPECT_EQ(data, want[k].data) << "batch " << k;
  }
  ASSERT_EQ(cudaLaunchHostFunc(consumer->get(), SleepOnStream, reinterpret_cast<void*>(20)),
            cudaSuccess);
  l->reset();  // destroys while the consumer stream is still busy with the held batch
  ASSERT_OK(consumer->Synchronize());
}

#ifdef KILN_HAVE_CUDA_KERNELS

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, mant = h & 1023;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 1024), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
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
      const std::vector<HostCopy> want = Reference(ds.dir(), cpu_aug, 2);
      LoaderOptions gpu = Opts(0, prefetch, false);
      NormalizeOptions no;
      no.out_dtype = dtype;
      const float mean[3] = {123.675f, 116.28f, 103.53f}, sd[3] = {58.395f, 57.12f, 57.375f};
      for (int c = 0; c < 3; ++c) {
        no.mean[c] = mean[c];
        no.std[c] = sd[c];
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
      const double tol = dtype == DType::kFloat16 ? 1e-2 : 1e-3;
      size_t k = 0;
      double worst = 0;
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
          const size_t elems = out_schema.sample_bytes() / DTypeSize(dtype);
          std::vector<float> ref(elems);
          for (uint32_t s = 0; s < b.size; ++s) {
            NormalizeSampleOnHost(want[k].data.data() + s * cropped.sample_bytes(), cropped, no,
                                  ref.data());
            for (size_t i = 0; i < elems; ++i) {
              float g;
              if (dtype == DType::kFloat16) {
                uint16_t h;
                std::memcpy(&h, got.data() + (s * elems + i) * 2, 2);
                g = HalfToFloat(h);
              } else {
                std::memcpy(&g, got.data() + (s * elems + i) * 4, 4);
              }
              const double d = std::fabs(double{g} - ref[i]);
              worst = std::max(worst, d);
              ASSERT_LE(d, tol) << "batch " << k << " sample " << s << " element " << i;
            }
          }
          ++k;
        }
      }
      EXPECT_EQ(k, want.size());
      std::printf("fused kernel: max |gpu - cpu| = %.3g over %zu batches\n", worst, k);
    }
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
  GTEST_SKIP() << "no CUDA kernels in this build (nvcc was not found at configure time)";
}
#endif

}  // namespace
}  // namespace kiln
