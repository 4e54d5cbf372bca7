// LoaderOptions::device where no CUDA device is usable (this build without the CUDA runtime, or
// a machine without a GPU or driver): the loader says so once on stderr and serves host batches
// byte-identical to device = -1, with no device pointers. Also the option's validation, and the
// no-device behaviour of the CUDA handles. Runs everywhere; on a GPU machine the fallback cases
// skip (gpu_upload_test covers device batches there).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;

LoaderOptions Opts(int device, uint32_t prefetch) {
  LoaderOptions o;
  o.batch_size = 7;
  o.num_threads = 3;
  o.prefetch = prefetch;
  o.seed = 11;
  o.device = device;
  o.augment.crop_height = 6;
  o.augment.crop_width = 5;
  o.augment.flip = true;
  return o;
}

// All of one epoch's batches as (data, labels, indices) bytes.
std::vector<std::vector<uint8_t>> Epoch(Loader& loader, bool expect_device_null) {
  std::vector<std::vector<uint8_t>> out;
  Batch b;
  while (true) {
    Result<bool> r = loader.Next(&b);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || !*r) break;
    if (expect_device_null) {
      EXPECT_EQ(b.device_data, nullptr);
      EXPECT_EQ(b.device_labels, nullptr);
      EXPECT_EQ(b.ready_event, nullptr);
      EXPECT_EQ(b.device, -1);
      const Status wait = b.WaitOn(nullptr);
      EXPECT_EQ(wait.code(), StatusCode::kInvalidArgument) << wait.ToString();
    }
    std::vector<uint8_t> bytes(b.data, b.data + b.bytes());
    const auto* l = reinterpret_cast<const uint8_t*>(b.labels);
    bytes.insert(bytes.end(), l, l + b.size * sizeof(int64_t));
    const auto* ix = reinterpret_cast<const uint8_t*>(b.sample_indices);
    bytes.insert(bytes.end(), ix, ix + b.size * sizeof(uint64_t));
    out.push_back(std::move(bytes));
  }
  return out;
}

TEST(DeviceFallbackTest, NoDeviceServesIdenticalHostBatchesAndWarnsOnce) {
  std::string reason;
  if (CudaDeviceAvailable(&reason)) {
    GTEST_SKIP() << "a CUDA device is present: the fallback is not taken (see gpu_upload_test)";
  }
  TestDatasetOptions dso;
  dso.num_samples = 101;
  dso.schema = MakeSchema(9, 8, 3);
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  for (uint32_t prefetch : {1u, 2u, 4u}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    Result<std::unique_ptr<Loader>> host = Loader::Open(ds.dir(), Opts(-1, prefetch));
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    ::testing::internal::CaptureStderr();
    Result<std::unique_ptr<Loader>> dev = Loader::Open(ds.dir(), Opts(0, prefetch));
    Result<std::unique_ptr<Loader>> dev2 = Loader::Open(ds.dir(), Opts(0, prefetch));
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    ASSERT_TRUE(dev2.ok()) << dev2.status().ToString();
    EXPECT_FALSE((*dev)->device_batches());
    const std::string warning = "device 0 requested but " + reason;
    if (prefetch == 1u) {  // the first loaders in the process: exactly one warning
      const size_t first = err.find(warning);
      EXPECT_NE(first, std::string::npos) << err;
      EXPECT_EQ(err.find(warning, first + 1), std::string::npos) << "warned twice:\n" << err;
      EXPECT_NE(err.find("host batches"), std::string::npos) << err;
    } else {
      EXPECT_EQ(err.find(warning), std::string::npos) << "warned again:\n" << err;
    }
    for (uint64_t e = 0; e < 2; ++e) {
      const auto want = Epoch(**host, false);
      const auto got = Epoch(**dev, true);
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(want.size(), (*host)->batches_per_epoch());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(want[k], got[k]) << "batch " << k;
    }
  }
}

TEST(DeviceFallbackTest, DeviceBelowMinusOneIsInvalid) {
  TestDatasetOptions dso;
  dso.num_samples = 10;
  TestDataset ds(dso);
  ASSERT_TRUE(ds.ok());
  Result<std::unique_ptr<Loader>> l = Loader::Open(ds.dir(), Opts(-2, 2));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("device -2"), std::string::npos) << l.status().ToString();
}

TEST(DeviceFallbackTest, HandlesReportWhyWithoutDevice) {
  std::string reason;
  if (CudaDeviceAvailable(&reason)) GTEST_SKIP() << "a CUDA device is present";
  Result<CudaStream> s = CudaStream::Create(0);
  ASSERT_FALSE(s.ok());
  // Without the runtime: NotSupported; with the runtime and no device/driver: the runtime's
  // error, naming the call that failed.
  EXPECT_NE(s.status().message().find("cuda"), std::string::npos) << s.status().ToString();
  Result<DeviceBuffer> b = DeviceBuffer::Allocate(1024);
  EXPECT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("cuda"), std::string::npos) << b.status().ToString();
  EXPECT_TRUE(CudaStatus(0, "cudaNothing").ok());
  const Status bad = CudaStatus(1, "cudaSomething");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("cudaSomething"), std::string::npos) << bad.ToString();
  CudaStream empty;  // destructors of empty and moved-from handles are no-ops
  CudaEvent empty_event;
  DeviceBuffer empty_buffer;
  CudaStream moved(std::move(empty));
  EXPECT_EQ(moved.get(), nullptr);
}

}  // namespace
}  // namespace kiln
