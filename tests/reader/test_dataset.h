// kiln::testing::TestDataset: a small shard dataset written at test time into a fresh temporary
// directory, whose every byte is a known function of the sample index, so a reader test can
// check what it got against what was written without keeping a copy.
//
// Sample i's raw bytes: bytes 0..7 hold i (little-endian), byte p >= 8 holds (13 i + p) mod 256,
// so no two samples are equal, columns of a row differ (flip tests can see a mirror), and a
// sample of a few hundred bytes repeats with period 256 (zstd compresses it). Sample i's label is
// 7 i + 3 (distinct per sample, so a label paired with the wrong data is caught). Sample i's key
// is i in 8 decimal digits.
//
// Ownership: the TestDataset removes its directory on destruction.
// Thread safety: none needed; build it on the test's thread.
#ifndef KILN_TESTS_READER_TEST_DATASET_H_
#define KILN_TESTS_READER_TEST_DATASET_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/record_codec.h"
#include "formats/shards/shard_format.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln::testing {

// Returns byte `pos` of sample `index`'s raw tensor bytes (see the file comment).
inline uint8_t SampleByte(uint64_t index, uint64_t pos) {
  if (pos < 8) return static_cast<uint8_t>(index >> (8 * pos));
  return static_cast<uint8_t>(index * 13 + pos);
}

// Returns sample `index`'s raw bytes for `schema` (schema.sample_bytes() bytes).
inline std::vector<uint8_t> SampleBytes(const TensorSchema& schema, uint64_t index) {
  std::vector<uint8_t> bytes(schema.sample_bytes());
  for (uint64_t p = 0; p < bytes.size(); ++p) bytes[p] = SampleByte(index, p);
  return bytes;
}

inline int64_t SampleLabel(uint64_t index) { return static_cast<int64_t>(index * 7 + 3); }

inline std::string SampleKey(uint64_t index) {
  char key[32];
  std::snprintf(key, sizeof(key), "%08llu", static_cast<unsigned long long>(index));
  return key;
}

// The uint8 HWC schema of `height` x `width` x `channels` samples.
inline TensorSchema MakeSchema(uint32_t height, uint32_t width, uint32_t channels,
                               Layout layout = Layout::kHWC, DType dtype = DType::kUint8) {
  TensorSchema schema;
  schema.dtype = dtype;
  schema.layout = layout;
  schema.height = height;
  schema.width = width;
  schema.channels = channels;
  return schema;
}

struct TestDatasetOptions {
  uint64_t num_samples = 100;
  TensorSchema schema = MakeSchema(8, 8, 3);
  Compression compression;  // Default none.
  // Exact records per shard for uncompressed records (the shard size is computed from the shard
  // format's layout); 0 to use shard_size_bytes instead. Default 0.
  uint64_t samples_per_shard = 0;
  uint64_t shard_size_bytes = uint64_t{128} << 20;  // Default 128 MiB: one shard.
  std::string format = "shards";                    // a format registry name. Default shards.
};

class TestDataset {
 public:
  // Writes the dataset; fails the current test (and returns a dataset with an empty dir) on
  // error. Call with ASSERT_NO_FATAL_FAILURE or check ok().
  explicit TestDataset(const TestDatasetOptions& options) : options_(options) {
    static std::atomic<uint64_t> counter{0};
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name()
                                       : std::string("no_test");
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = ::testing::TempDir() + "kiln_reader_" + std::to_string(::getpid()) + "_" + name + "_" +
           std::to_string(counter++);
    (void)RemoveTree(dir_);
    (void)RemoveTree(dir_ + ".partial");
    ok_ = Write();
  }
  ~TestDataset() {
    if (!dir_.empty()) (void)RemoveTree(dir_);
  }
  TestDataset(const TestDataset&) = delete;
  TestDataset& operator=(const TestDataset&) = delete;

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  const TensorSchema& schema() const { return options_.schema; }
  uint64_t num_samples() const { return options_.num_samples; }
  const Manifest& manifest() const { return manifest_; }
  // Returns the path of shard file `s`.
  std::string ShardPath(size_t s) const { return dir_ + "/" + manifest_.files.at(s).file; }

  // Opens the dataset for a Loader. Fails the current test on error.
  std::shared_ptr<const Dataset> Open() const {
    Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir_);
    EXPECT_TRUE(ds.ok()) << ds.status().ToString();
    if (!ds.ok()) return nullptr;
    return std::shared_ptr<const Dataset>(std::move(ds).value());
  }

 private:
  bool Write() {
    DatasetWriterOptions wo;
    wo.schema = options_.schema;
    wo.shard_size_bytes = options_.shard_size_bytes;
    wo.format = options_.format;
    if (options_.samples_per_shard != 0) {
      // A shard of k raw records with 8-byte keys: 64-byte header, k records each padded to the
      // record alignment, k 40-byte index entries, k keys, the 64-byte footer.
      const uint64_t record = AlignUp(options_.schema.sample_bytes(), wo.record_alignment);
      const uint64_t k = options_.samples_per_shard;
      uint64_t bytes = kShardHeaderBytes + k * record + k * (kShardIndexEntryBytes + 8);
      bytes = AlignUp(bytes, 8) + kShardFooterBytes;
      wo.shard_size_bytes = std::max<uint64_t>(bytes, 1024);
      EXPECT_EQ(options_.compression.codec, Codec::kNone)
          << "samples_per_shard needs uncompressed records";
      EXPECT_GE(bytes, 1024u) << "samples_per_shard too small for the 1 KiB minimum shard size";
    }
    Result<std::unique_ptr<DatasetWriter>> writer = DatasetWriter::Create(dir_, wo);
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    if (!writer.ok()) return false;
    RecordEncoder encoder(options_.compression);
    EncodedRecord record;
    for (uint64_t i = 0; i < options_.num_samples; ++i) {
      const std::vector<uint8_t> raw = SampleBytes(options_.schema, i);
      Status s = encoder.Encode(raw.data(), raw.size(), SampleLabel(i), SampleKey(i), &record);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return false;
      s = (*writer)->Add(record);
      EXPECT_TRUE(s.ok()) << s.ToString();
      if (!s.ok()) return false;
    }
    Manifest manifest;
    manifest.compression = options_.compression.ToString();
    Result<Manifest> written = (*writer)->Finish(manifest);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
    if (!written.ok()) return false;
    manifest_ = std::move(written).value();
    return true;
  }

  TestDatasetOptions options_;
  std::string dir_;
  Manifest manifest_;
  bool ok_ = false;
};

}  // namespace kiln::testing

#endif  // KILN_TESTS_READER_TEST_DATASET_H_
