// The Loader over HDF5 datasets (formats/hdf5/hdf5_dataset.h): the same batches as over shards for
// the same records, raw (contiguous) and zstd (chunked), with several fetch threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"
#include "reader/loader.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string WriteDataset(const std::string& out, const std::string& format, uint64_t n,
                         const char* compression) {
  DatasetWriterOptions o;
  o.schema = testing::MakeSchema(8, 8, 3);
  o.format = format;
  const uint64_t sample_bytes = o.schema.sample_bytes();
  Result<Manifest> written =
      testing::WriteTestDataset(out, o, *Compression::Parse(compression), n, [&](uint64_t i) {
        std::vector<uint8_t> raw(sample_bytes);
        for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(i + j / 5);
        return testing::TestSample{raw, static_cast<int64_t>(i % 10), "k/" + std::to_string(i)};
      });
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  return out;
}

TEST(Hdf5Loader, BatchesEqualShardBatches) {
  const std::string dir =
      (fs::temp_directory_path() / ("kiln_hdf5_loader_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* c : {"none", "zstd"}) {
    SCOPED_TRACE(c);
    const std::string shards = WriteDataset(dir + "/shards-" + c, "shards", 777, c);
    const std::string hdf5 = WriteDataset(dir + "/hdf5-" + c, "hdf5", 777, c);
    LoaderOptions lo;
    lo.batch_size = 64;
    lo.num_threads = 3;
    lo.seed = 5;
    auto a = Loader::Open(shards, lo);
    auto b = Loader::Open(hdf5, lo);
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    for (int epoch = 0; epoch < 2; ++epoch) {
      Batch x, y;
      uint64_t batches = 0;
      for (;;) {
        Result<bool> ra = (*a)->Next(&x);
        Result<bool> rb = (*b)->Next(&y);
        ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().ToString();
        ASSERT_EQ(*ra, *rb);
        if (!*ra) break;
        ++batches;
        ASSERT_EQ(x.size, y.size);
        ASSERT_EQ(0, std::memcmp(x.data, y.data, x.bytes()));
        ASSERT_EQ(0, std::memcmp(x.labels, y.labels, x.size * sizeof(int64_t)));
        ASSERT_EQ(0, std::memcmp(x.sample_indices, y.sample_indices, x.size * sizeof(uint64_t)));
      }
      EXPECT_GT(batches, 10u);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Read-ahead's view of an HDF5 file: each sample's StoredRange lies inside data.h5 and holds its
// stored bytes (raw: the sample itself; zstd: the chunk, which decompresses to it).
TEST(Hdf5Loader, StoredRangesLieInsideTheFileAndHoldTheSamples) {
  const std::string dir =
      (fs::temp_directory_path() / ("kiln_hdf5_ranges_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* c : {"none", "zstd"}) {
    SCOPED_TRACE(c);
    const std::string path = WriteDataset(dir + "/hdf5-" + c, "hdf5", 300, c);
    auto ds = Dataset::Open(path);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    const uint64_t file_bytes = fs::file_size(path + "/data.h5");
    const uint64_t sample_bytes = (*ds)->schema().sample_bytes();
    const uint8_t* lowest = nullptr;
    const uint8_t* highest = nullptr;
    RecordDecoder decoder;
    for (uint64_t i = 0; i < 300; ++i) {
      const MappedRange r = (*ds)->StoredRange(i);
      ASSERT_FALSE(r.empty()) << i;
      ASSERT_LE(r.size, std::string(c) == "none" ? sample_bytes : 2 * sample_bytes + 64) << i;
      if (lowest == nullptr || r.data < lowest) lowest = r.data;
      if (highest == nullptr || r.data + r.size > highest) highest = r.data + r.size;
      if (std::string(c) == "none") {
        std::vector<uint8_t> out(sample_bytes);
        int64_t label = 0;
        ASSERT_TRUE((*ds)->ReadSample(i, &decoder, out.data(), &label).ok());
        ASSERT_EQ(std::memcmp(r.data, out.data(), sample_bytes), 0) << i;
      }
    }
    // All ranges fit in one span no longer than the file: inside its mapping, none past EOF.
    ASSERT_LE(static_cast<uint64_t>(highest - lowest), file_bytes);
    EXPECT_TRUE((*ds)->StoredRange(300).empty());
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
