// The host reference that the device-batch tests (device_protocol_test.cc on a simulated device,
// gpu_upload_test.cc on a real GPU) compare every device batch with: the loader options both
// use, and every batch of a host loader over the same dataset, copied out as bytes.
//
// Thread safety: none needed; call them on the test's thread.
#ifndef KILN_TESTS_READER_DEVICE_BATCH_REFERENCE_H_
#define KILN_TESTS_READER_DEVICE_BATCH_REFERENCE_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reader/loader.h"

namespace kiln::testing {

// One host batch, copied out of the loader's slot.
struct HostBatchCopy {
  std::vector<uint8_t> data;    // Batch::bytes() bytes
  std::vector<int64_t> labels;  // Batch::size labels
  std::vector<uint64_t> ids;    // the samples' dataset indices
  uint64_t epoch = 0;

  // The labels as the bytes a device copy of Batch::device_labels reads (little-endian int64).
  std::vector<uint8_t> label_bytes() const {
    const auto* p = reinterpret_cast<const uint8_t*>(labels.data());
    return std::vector<uint8_t>(p, p + labels.size() * sizeof(int64_t));
  }
};

inline HostBatchCopy CopyHostBatch(const Batch& b) {
  HostBatchCopy c;
  c.data.assign(b.data, b.data + b.bytes());
  c.labels.assign(b.labels, b.labels + b.size);
  c.ids.assign(b.sample_indices, b.sample_indices + b.size);
  c.epoch = b.epoch;
  return c;
}

// Every batch of `epochs` epochs of a host loader (`o` with device -1) over `dir`, in order.
inline std::vector<HostBatchCopy> HostReference(const std::string& dir, LoaderOptions o,
                                                uint64_t epochs) {
  o.device = -1;
  std::vector<HostBatchCopy> out;
  Result<std::unique_ptr<Loader>> l = Loader::Open(dir, o);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (!l.ok()) return out;
  for (uint64_t e = 0; e < epochs; ++e) {
    Batch b;
    while (true) {
      Result<bool> r = (*l)->Next(&b);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok() || !*r) break;
      out.push_back(CopyHostBatch(b));
    }
  }
  return out;
}

// The device tests' loader options: batches of 8, seed 5, `threads` fetch threads, `prefetch`
// batches ahead, on `device` (-1: host batches); with `augment`, a 12 x 10 random crop and flips.
inline LoaderOptions DeviceTestOptions(int device, uint32_t threads, uint32_t prefetch,
                                       bool augment) {
  LoaderOptions o;
  o.batch_size = 8;
  o.num_threads = threads;
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

}  // namespace kiln::testing

#endif  // KILN_TESTS_READER_DEVICE_BATCH_REFERENCE_H_
