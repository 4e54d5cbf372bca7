// The direct io path (LoaderOptions::io = kDirect, reader/direct_reader.h): batches
// byte-identical to the mapped path for every order, thread count, codec, record size and
// crop/flip; the same named errors for a corrupt record and a truncated shard; resume across
// the two paths; the automatic choice; DirectQueue's reads at the end of a file.
//
// Tests that need io_uring skip where this process cannot create one (DirectIoAvailable says
// why); loader_direct_fallback_test forces that case and checks the fallback.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/xxh3.h"
#include "reader/direct_reader.h"
#include "reader/loader.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using testing::TestDataset;
using testing::TestDatasetOptions;

#define SKIP_WITHOUT_IO_URING()                                           \
  do {                                                                    \
    std::string why;                                                      \
    if (!DirectIoAvailable(&why)) GTEST_SKIP() << "no io_uring: " << why; \
  } while (0)

// Every batch of `epochs` epochs: data, labels, indices and padding, concatenated.
struct Epochs {
  std::vector<uint8_t> data;
  std::vector<int64_t> labels;
  std::vector<uint64_t> indices;
  std::vector<uint8_t> padding;
  uint64_t batches = 0;
  IoMode path = IoMode::kAuto;
  Status error;
};

Epochs ReadAll(const std::shared_ptr<const Dataset>& dataset, const LoaderOptions& lo,
               uint32_t epochs = 2, uint32_t max_batches = UINT32_MAX) {
  Epochs out;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(dataset, lo);
  if (!loader.ok()) {
    out.error = loader.status();
    return out;
  }
  out.path = (*loader)->io_path();
  for (uint32_t e = 0; e < epochs; ++e) {
    (*loader)->SetEpoch(e);
    Batch batch;
    while (out.batches < max_batches) {
      Result<bool> more = (*loader)->Next(&batch);
      if (!more.ok()) {
        out.error = more.status();
        return out;
      }
      if (!*more) break;
      ++out.batches;
      out.data.insert(out.data.end(), batch.data, batch.data + batch.bytes());
      out.labels.insert(out.labels.end(), batch.labels, batch.labels + batch.size);
      out.indices.insert(out.indices.end(), batch.sample_indices,
                         batch.sample_indices + batch.size);
      out.padding.insert(out.padding.end(), batch.is_padding, batch.is_padding + batch.size);
    }
  }
  return out;
}

void ExpectSame(const Epochs& a, const Epochs& b, const std::string& what) {
  ASSERT_TRUE(a.error.ok()) << what << ": " << a.error.ToString();
  ASSERT_TRUE(b.error.ok()) << what << ": " << b.error.ToString();
  EXPECT_GT(a.batches, 0u) << what;
  EXPECT_EQ(a.batches, b.batches) << what;
  EXPECT_TRUE(a.data == b.data) << what << ": sample bytes differ";
  EXPECT_EQ(a.labels, b.labels) << what;
  EXPECT_EQ(a.indices, b.indices) << what;
  EXPECT_EQ(a.padding, b.padding) << what;
}

struct DirectCase {
  const char* name;
  TensorSchema schema;
  Compression compression;
  uint64_t samples;
  uint64_t shard_bytes;
};

class LoaderDirectTest : public ::testing::TestWithParam<DirectCase> {};

// Records of 192 bytes (21 to a 4 KiB block, most straddling none, some straddling two),
// 12 KiB (every record straddles blocks) and zstd (records of varied stored size at 64-byte
// offsets): every alignment case of the covering range.
INSTANTIATE_TEST_SUITE_P(Records, LoaderDirectTest,
                         ::testing::Values(DirectCase{"raw_192B", testing::MakeSchema(8, 8, 3),
                                                      Compression{}, 1000, 64 << 10},
                                           DirectCase{"raw_12KiB", testing::MakeSchema(64, 64, 3),
                                                      Compression{}, 300, 1 << 20},
                                           DirectCase{"zstd_12KiB", testing::MakeSchema(64, 64, 3),
                                                      Compression{Codec::kZstd, 3}, 300, 4 << 10}),
                         [](const ::testing::TestParamInfo<DirectCase>& p) {
                           return std::string(p.param.name);
                         });

TEST_P(LoaderDirectTest, BatchesAreByteIdenticalToTheMappedPath) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = GetParam().schema;
  o.compression = GetParam().compression;
  o.num_samples = GetParam().samples;
  o.shard_size_bytes = GetParam().shard_bytes;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> dataset = data.Open();
  ASSERT_GT(dataset->data_file_count(), 1u) << "the case should span several shards";
  for (ShuffleMode shuffle : {ShuffleMode::kExact, ShuffleMode::kBlock, ShuffleMode::kNone}) {
    for (uint32_t threads : {1u, 3u}) {
      for (bool augment : {false, true}) {
        LoaderOptions lo;
        lo.batch_size = 48;
        lo.num_threads = threads;
        lo.shuffle = shuffle;
        lo.block_bytes = 16 * o.schema.sample_bytes();
        lo.shuffle_window = 3;
        lo.seed = 11;
        if (augment) {
          lo.augment.crop_height = o.schema.height / 2;
          lo.augment.crop_width = o.schema.width / 2;
          lo.augment.flip = true;
        }
        // A small in-flight budget: queues of a few reads, so buffers are reused many times.
        lo.read_ahead_bytes = 5 * (o.schema.sample_bytes() + 8192);
        lo.io = IoMode::kMmap;
        const Epochs mapped = ReadAll(dataset, lo);
        lo.io = IoMode::kDirect;
        const Epochs direct = ReadAll(dataset, lo);
        const std::string what = std::string(ShuffleModeName(shuffle)) + " threads " +
                                 std::to_string(threads) + (augment ? " crop+flip" : "");
        EXPECT_EQ(mapped.path, IoMode::kMmap) << what;
        EXPECT_EQ(direct.path, IoMode::kDirect) << what;
        ExpectSame(mapped, direct, what);
        // And against what was written: the bytes, not just agreement between paths.
        if (!augment && direct.error.ok()) {
          const uint64_t bytes = o.schema.sample_bytes();
          for (size_t k = 0; k < direct.indices.size(); k += 7) {
            const std::vector<uint8_t> want = testing::SampleBytes(o.schema, direct.indices[k]);
            ASSERT_EQ(std::memcmp(direct.data.data() + k * bytes, want.data(), bytes), 0)
                << what << ": sample " << direct.indices[k];
            ASSERT_EQ(direct.labels[k], testing::SampleLabel(direct.indices[k])) << what;
          }
        }
      }
    }
  }
}

TEST(LoaderDirectTest, StatsCountTheReadsAndTheirBound) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(64, 64, 3);
  o.num_samples = 200;
  o.shard_size_bytes = 1 << 20;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 50;
  lo.num_threads = 2;
  lo.io = IoMode::kDirect;
  lo.read_ahead_bytes = 8 * 16384;  // 4 reads of 16 KiB buffers per thread
  Result<std::unique_ptr<Loader>> loader = Loader::Create(data.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_EQ((*loader)->io_path(), IoMode::kDirect) << (*loader)->io_reason();
  EXPECT_EQ((*loader)->direct_depth(), 4u);
  Batch batch;
  while (true) {
    Result<bool> more = (*loader)->Next(&batch);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
  }
  const LoaderStats stats = (*loader)->stats();
  EXPECT_EQ(stats.direct_reads, 200u);  // one read per record
  EXPECT_GE(stats.direct_read_bytes, 200u * 12288);
  EXPECT_LE(stats.direct_read_bytes, 200u * (12288 + 8192));
  EXPECT_GE(stats.direct_max_in_flight, 2u);
  EXPECT_LE(stats.direct_max_in_flight, 4u);
  EXPECT_EQ(stats.read_ahead_samples, 0u) << "no madvise read-ahead on the direct path";
}

// A record whose bytes changed on disk: the same Corruption, naming file, record and offset,
// on both paths (the checksum runs over the bytes the direct read delivered).
TEST(LoaderDirectTest, CorruptRecordGivesTheSameNamedErrorAsTheMappedPath) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(64, 64, 3);
  o.num_samples = 100;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  {
    // Sample 37's record sits at 64 + 37 * 12288 in the only shard: flip one byte in its middle.
    const int fd = ::open(data.ShardPath(0).c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const off_t at = 64 + 37 * 12288 + 5000;
    uint8_t byte = 0;
    ASSERT_EQ(::pread(fd, &byte, 1, at), 1);
    byte ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &byte, 1, at), 1);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }
  std::shared_ptr<const Dataset> dataset = data.Open();
  LoaderOptions lo;
  lo.batch_size = 100;
  lo.num_threads = 2;
  lo.shuffle = ShuffleMode::kNone;
  lo.io = IoMode::kMmap;
  const Epochs mapped = ReadAll(dataset, lo, 1);
  lo.io = IoMode::kDirect;
  const Epochs direct = ReadAll(dataset, lo, 1);
  ASSERT_EQ(direct.path, IoMode::kDirect);
  ASSERT_FALSE(mapped.error.ok());
  ASSERT_FALSE(direct.error.ok());
  EXPECT_EQ(direct.error.code(), StatusCode::kCorruption) << direct.error.ToString();
  EXPECT_EQ(direct.error.ToString(), mapped.error.ToString());
  EXPECT_NE(direct.error.message().find("record 37"), std::string::npos) << direct.error.ToString();
  EXPECT_NE(direct.error.message().find("checksum mismatch"), std::string::npos);
  EXPECT_NE(direct.error.message().find(data.ShardPath(0)), std::string::npos);
}

// Shards truncated while the loader reads them directly: the loader's named IOError, never
// SIGBUS, and the loader keeps serving later batches' errors rather than hanging.
TEST(LoaderDirectTest, ShardTruncatedUnderDirectReadsIsANamedIOError) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(64, 64, 3);
  o.num_samples = 600;
  o.samples_per_shard = 100;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;
  lo.batch_size = 20;
  lo.num_threads = 2;
  lo.prefetch = 1;
  lo.shuffle = ShuffleMode::kNone;  // shard 0's samples come first
  lo.io = IoMode::kDirect;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(data.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_EQ((*loader)->io_path(), IoMode::kDirect);
  Batch batch;
  Result<bool> first = (*loader)->Next(&batch);
  ASSERT_TRUE(first.ok() && *first) << first.status().ToString();
  for (size_t s = 1; s < data.manifest().files.size(); ++s) {
    ASSERT_EQ(::truncate(data.ShardPath(s).c_str(), 64), 0);
  }
  int errors = 0;
  for (int i = 0; i < 100; ++i) {
    Result<bool> more = (*loader)->Next(&batch);
    if (!more.ok()) {
      ++errors;
      EXPECT_EQ(more.status().code(), StatusCode::kIOError) << more.status().ToString();
      EXPECT_NE(more.status().message().find("shard-0000"), std::string::npos)
          << more.status().message();
      EXPECT_NE(more.status().message().find(" record "), std::string::npos)
          << more.status().message();
      EXPECT_NE(more.status().message().find("truncated or replaced while open"), std::string::npos)
          << more.status().message();
      EXPECT_EQ(more.status().message().find(data.ShardPath(0)), std::string::npos)
          << "shard 0 is intact: " << more.status().message();
    } else if (!*more) {
      break;
    }
  }
  EXPECT_GE(errors, 20) << "every batch from shards 1-5 should fail";
}

// An unlinked shard keeps its data while the loader holds it open: correct batches.
TEST(LoaderDirectTest, ShardUnlinkedUnderDirectReadsStillReadsCorrectly) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(64, 64, 3);
  o.num_samples = 300;
  o.samples_per_shard = 100;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> dataset = data.Open();
  LoaderOptions lo;
  lo.batch_size = 30;
  lo.num_threads = 2;
  lo.io = IoMode::kMmap;
  const Epochs want = ReadAll(dataset, lo, 1);
  lo.io = IoMode::kDirect;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(dataset, lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  for (size_t s = 0; s < data.manifest().files.size(); ++s) {
    ASSERT_EQ(::unlink(data.ShardPath(s).c_str()), 0);
  }
  std::vector<uint8_t> got;
  Batch batch;
  while (true) {
    Result<bool> more = (*loader)->Next(&batch);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    got.insert(got.end(), batch.data, batch.data + batch.bytes());
  }
  EXPECT_TRUE(got == want.data);
}

// A state saved on one path resumes on the other: the same remaining batches.
TEST(LoaderDirectTest, ResumeAcrossPathsServesTheSameBatches) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(16, 16, 3);
  o.num_samples = 500;
  o.shard_size_bytes = 64 << 10;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> dataset = data.Open();
  for (ShuffleMode shuffle : {ShuffleMode::kExact, ShuffleMode::kBlock}) {
    LoaderOptions lo;
    lo.batch_size = 32;
    lo.num_threads = 2;
    lo.shuffle = shuffle;
    lo.block_bytes = 10 * o.schema.sample_bytes();
    lo.io = IoMode::kMmap;
    const Epochs whole = ReadAll(dataset, lo, 1);
    ASSERT_TRUE(whole.error.ok()) << whole.error.ToString();
    Result<std::unique_ptr<Loader>> first = Loader::Create(dataset, lo);
    ASSERT_TRUE(first.ok());
    Batch batch;
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(*(*first)->Next(&batch));
    lo.resume = (*first)->state();
    lo.io = IoMode::kDirect;
    const Epochs rest = ReadAll(dataset, lo, 1);
    ASSERT_TRUE(rest.error.ok()) << rest.error.ToString();
    EXPECT_EQ(rest.path, IoMode::kDirect);
    const uint64_t done = 5 * 32;
    ASSERT_EQ(rest.indices.size() + done, whole.indices.size()) << ShuffleModeName(shuffle);
    EXPECT_TRUE(std::equal(rest.indices.begin(), rest.indices.end(), whole.indices.begin() + done))
        << ShuffleModeName(shuffle);
    EXPECT_TRUE(std::equal(rest.data.begin(), rest.data.end(),
                           whole.data.begin() + done * o.schema.sample_bytes()))
        << ShuffleModeName(shuffle);
  }
}

// kAuto: a dataset that fits in memory reads through the mappings, and says why.
TEST(LoaderDirectTest, AutoReadsASmallDatasetThroughTheMappings) {
  TestDataset data(TestDatasetOptions{});
  ASSERT_TRUE(data.ok());
  LoaderOptions lo;  // io kAuto
  Result<std::unique_ptr<Loader>> loader = Loader::Create(data.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ((*loader)->io_path(), IoMode::kMmap);
  EXPECT_FALSE((*loader)->io_reason().empty());
  EXPECT_EQ((*loader)->direct_depth(), 0u);
  if (DirectIoAvailable()) {
    EXPECT_NE((*loader)->io_reason().find("fits in half the memory limit"), std::string::npos)
        << (*loader)->io_reason();
  }
}

TEST(LoaderDirectTest, IoModeNamesRoundTrip) {
  for (IoMode m : {IoMode::kAuto, IoMode::kMmap, IoMode::kDirect}) {
    Result<IoMode> parsed = ParseIoMode(IoModeName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  Result<IoMode> bad = ParseIoMode("uring");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("uring"), std::string::npos);
}

TEST(MemoryLimitTest, IsAtMostTheMachinesMemory) {
  const uint64_t limit = MemoryLimitBytes();
  EXPECT_GT(limit, uint64_t{16} << 20);
  EXPECT_LE(limit, static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                       static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
}

// DirectQueue on its own: aligned reads land in their buffers; a read running past the end of
// the file returns the bytes up to it (the loader's short-read check relies on this).
TEST(DirectQueueTest, ReadsLandInTheirBuffersAndStopAtTheEndOfTheFile) {
  SKIP_WITHOUT_IO_URING();
  TestDatasetOptions o;
  o.schema = testing::MakeSchema(64, 64, 3);
  o.num_samples = 10;
  TestDataset data(o);
  ASSERT_TRUE(data.ok());
  std::shared_ptr<const Dataset> dataset = data.Open();
  Result<std::unique_ptr<DirectFiles>> files = DirectFiles::Open(*dataset);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ((*files)->count(), 1u);
  const uint32_t align = (*files)->alignment(0);
  EXPECT_TRUE(align == 1 || (align >= 512 && align <= 4096 && (align & (align - 1)) == 0));
  Result<std::unique_ptr<DirectQueue>> queue = DirectQueue::Create(3, 3 * 4096);
  ASSERT_TRUE(queue.ok()) << queue.status().ToString();
  EXPECT_EQ((*queue)->buffer_bytes(), 3u * 4096);
  const uint64_t size = data.manifest().files[0].bytes;
  const uint64_t last = size / 4096 * 4096;  // the last, partial block
  (*queue)->Queue(0, (*files)->fd(0), 0, 8192);
  (*queue)->Queue(2, (*files)->fd(0), last, 8192);
  ASSERT_TRUE((*queue)->Submit().ok());
  EXPECT_EQ((*queue)->in_flight(), 2u);
  std::vector<uint8_t> file(size);
  {
    const int fd = ::open(data.ShardPath(0).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, file.data(), size, 0), static_cast<ssize_t>(size));
    ::close(fd);
  }
  for (int i = 0; i < 2; ++i) {
    uint32_t buffer = 99;
    int64_t result = 0;
    ASSERT_TRUE((*queue)->Wait(&buffer, &result).ok());
    if (buffer == 0) {
      ASSERT_EQ(result, 8192);
      EXPECT_EQ(std::memcmp((*queue)->buffer(0), file.data(), 8192), 0);
    } else {
      ASSERT_EQ(buffer, 2u);
      ASSERT_EQ(result, static_cast<int64_t>(size - last));
      EXPECT_EQ(std::memcmp((*queue)->buffer(2), file.data() + last, size - last), 0);
    }
  }
  EXPECT_EQ((*queue)->in_flight(), 0u);
}

}  // namespace
}  // namespace kiln
