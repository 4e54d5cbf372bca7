// The Loader over an LMDB dataset (formats/lmdb/lmdb_dataset.h): same batches as over shards, and
// field case B25 (reader transactions do not leak over epochs), pinned by
// FieldCase_B25_ReaderSlotsBoundedOverEpochs.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"
#include "formats/lmdb/lmdb_dataset.h"
#include "reader/loader.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string WriteDataset(const std::string& out, const std::string& format, uint64_t n) {
  DatasetWriterOptions o;
  o.schema = testing::MakeSchema(8, 8, 3);
  o.format = format;
  const uint64_t sample_bytes = o.schema.sample_bytes();
  Result<Manifest> written =
      testing::WriteTestDataset(out, o, *Compression::Parse("zstd"), n, [&](uint64_t i) {
        std::vector<uint8_t> raw(sample_bytes);
        for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(i + j / 5);
        return testing::TestSample{raw, static_cast<int64_t>(i % 10), "k/" + std::to_string(i)};
      });
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  return out;
}

size_t OpenFds() {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) (void)e, ++n;
  return n;
}

std::string Scratch(const std::string& name) {
  const std::string dir =
      (fs::temp_directory_path() / ("kiln_lmdb_loader_" + std::to_string(::getpid()) + "_" + name))
          .string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(LmdbLoader, BatchesEqualShardBatches) {
  const std::string dir = Scratch("same");
  const std::string shards = WriteDataset(dir + "/shards", "shards", 777);
  const std::string lmdb = WriteDataset(dir + "/lmdb", "lmdb", 777);
  LoaderOptions lo;
  lo.batch_size = 64;
  lo.num_threads = 3;
  lo.seed = 5;
  auto a = Loader::Open(shards, lo);
  auto b = Loader::Open(lmdb, lo);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int epoch = 0; epoch < 2; ++epoch) {
    Batch x, y;
    for (;;) {
      Result<bool> ra = (*a)->Next(&x);
      Result<bool> rb = (*b)->Next(&y);
      ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().ToString();
      ASSERT_EQ(*ra, *rb);
      if (!*ra) break;
      ASSERT_EQ(x.size, y.size);
      ASSERT_EQ(0, std::memcmp(x.data, y.data, x.bytes()));
      ASSERT_EQ(0, std::memcmp(x.labels, y.labels, x.size * sizeof(int64_t)));
      ASSERT_EQ(0, std::memcmp(x.sample_indices, y.sample_indices, x.size * sizeof(uint64_t)));
    }
  }
  a->reset();
  b->reset();
  fs::remove_all(dir);
}

// B25: 1000 samples, 8 threads, 30 epochs with a fresh loader (and so fresh threads and epoch
// iterator) each time, one abandoned half-way. Read transactions stay <= threads + 1, the
// abandoned loader's are released, and open file descriptors do not grow. With MDB_NOLOCK
// kiln's readers take no slot in lock.mdb's reader table at all: `mdb_stat -r` lists none.
TEST(LmdbLoader, FieldCase_B25_ReaderSlotsBoundedOverEpochs) {
  const std::string dir = Scratch("b25");
  const std::string lmdb = WriteDataset(dir + "/lmdb", "lmdb", 1000);
  Result<Manifest> m = Manifest::Read(lmdb);
  ASSERT_TRUE(m.ok());
  auto opened = LmdbDataset::Open(lmdb, *m);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<const LmdbDataset> ds(std::move(*opened));
  const size_t fds_before = OpenFds();
  const uint32_t threads = 8;
  size_t max_txns = 0;
  for (uint64_t epoch = 0; epoch < 30; ++epoch) {
    LoaderOptions lo;
    lo.batch_size = 50;
    lo.num_threads = threads;
    lo.start_epoch = epoch;
    auto loader = Loader::Create(ds, lo);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    Batch batch;
    uint64_t samples = 0;
    const bool abandon = epoch == 13;
    for (;;) {
      Result<bool> r = (*loader)->Next(&batch);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (!*r) break;
      samples += batch.size;
      max_txns = std::max(max_txns, ds->read_transactions());
      if (epoch == 7 && batch.index == 3) {
        // An outside LMDB tool sees no reader slot of ours while we read.
        FILE* p = ::popen(("mdb_stat -r " + lmdb + " 2>/dev/null").c_str(), "r");
        std::string out;
        char buf[256];
        while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
        if (p != nullptr && ::pclose(p) == 0) {
          EXPECT_NE(out.find("no active readers"), std::string::npos) << out;
        }
      }
      if (abandon && samples >= 500) break;  // the iterator is dropped half-way
    }
    if (!abandon) {
      EXPECT_EQ(samples, 1000u);
    }
    loader->reset();  // joins the fetch threads: their transactions go back to the pool
    EXPECT_EQ(ds->active_read_transactions(), 0u) << "epoch " << epoch;
    EXPECT_LE(ds->read_transactions(), threads + 1) << "epoch " << epoch;
  }
  EXPECT_LE(max_txns, threads + 1);
  EXPECT_LE(OpenFds(), fds_before);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
