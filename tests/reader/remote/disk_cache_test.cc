// The local cache of a remote dataset (reader/remote/disk_cache.h) without a server: pieces
// stored by the filling process and read by it and by another instance (what a second process
// sharing the directory sees), the object file byte for byte against the golden file
// (reader/remote/disk_cache.md), an object of another version dropped, the capacity kept, and
// eviction that removes only other datasets' entries no one has open and never a file the cache
// did not make. The fill thread's downloads and the Loader's use are in remote_dataset_test.cc.
#include "reader/remote/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reader/remote/remote_client.h"

namespace kiln::remote {
namespace {

namespace fs = std::filesystem;

const char kGolden[] = KILN_SOURCE_DIR "/tests/data/golden-remote-cache/00000.cache";

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-disk-cache-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dataset of two objects: 10,000 and 4,096 bytes.
  static std::vector<ObjectInfo> Objects(const std::string& etag0 = "\"e0\"") {
    return {{"http://127.0.0.1:9/ds/shard-00000.kiln", 10000, etag0},
            {"http://127.0.0.1:9/ds/shard-00001.kiln", 4096, "\"e1\""}};
  }
  DiskCache::Options Opts(uint64_t capacity = 0) const {
    DiskCache::Options o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.piece_bytes = 4096;
    o.free_reserve_bytes = 0;
    return o;
  }
  static std::vector<uint8_t> Pattern(uint64_t offset, uint64_t length) {
    std::vector<uint8_t> b(length);
    for (uint64_t i = 0; i < length; ++i) b[i] = static_cast<uint8_t>((offset + i) * 7 + 3);
    return b;
  }
  static std::vector<uint8_t> FileBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_;
};

TEST_F(DiskCacheTest, StoredPiecesAreReadHereAndByAnotherInstance) {
  const std::vector<ObjectInfo> objects = Objects();
  auto filler = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", objects);
  ASSERT_TRUE(filler.ok()) << filler.status().ToString();
  auto other = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", objects);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  // Only one of them may fill; the other keeps reading.
  ASSERT_TRUE((*filler)->TryLockFill());
  EXPECT_FALSE((*other)->TryLockFill());
  EXPECT_FALSE((*other)->StorePiece(0, 1, Pattern(4096, 4096).data(), 4096).ok());

  std::vector<uint8_t> got(600);
  EXPECT_FALSE((*filler)->Read(objects[0], 4000, 600, got.data())) << "nothing is held yet";
  ASSERT_TRUE((*filler)->StorePiece(0, 1, Pattern(4096, 4096).data(), 4096).ok());
  // Inside piece 1: a hit, in both instances.
  got.assign(600, 0);
  ASSERT_TRUE((*filler)->Read(objects[0], 4200, 600, got.data()));
  EXPECT_EQ(got, Pattern(4200, 600));
  got.assign(600, 0);
  ASSERT_TRUE((*other)->Read(objects[0], 4200, 600, got.data()));
  EXPECT_EQ(got, Pattern(4200, 600));
  // Across pieces 0 and 1: a miss until piece 0 is held too.
  EXPECT_FALSE((*other)->Read(objects[0], 4000, 600, got.data()));
  ASSERT_TRUE((*filler)->StorePiece(0, 0, Pattern(0, 4096).data(), 4096).ok());
  ASSERT_TRUE((*other)->Read(objects[0], 4000, 600, got.data()));
  EXPECT_EQ(got, Pattern(4000, 600));
  // The last, short piece (10,000 - 8,192 bytes) and past the end.
  EXPECT_FALSE((*filler)->StorePiece(0, 2, Pattern(8192, 4096).data(), 4096).ok());
  ASSERT_TRUE((*filler)->StorePiece(0, 2, Pattern(8192, 1808).data(), 1808).ok());
  got.resize(1808);
  ASSERT_TRUE((*other)->Read(objects[0], 8192, 1808, got.data()));
  EXPECT_EQ(got, Pattern(8192, 1808));
  EXPECT_FALSE((*other)->Read(objects[0], 8192, 1809, got.data())) << "past the object's end";
  // Another ETag (the object as another open saw it) is never served from these pieces.
  ObjectInfo changed = objects[0];
  changed.etag = "\"e0-new\"";
  EXPECT_FALSE((*other)->Read(changed, 4200, 600, got.data()));
  const DiskCache::Stats s = (*other)->stats();
  EXPECT_EQ(s.pieces_held, 3u);
  EXPECT_EQ(s.pieces_total, 4u);
  EXPECT_EQ(s.reads, 3u);  // hits only
  EXPECT_EQ(s.bytes, 600u + 600 + 1808);
}

// The object file, byte for byte (disk_cache.md "Files"): header, one state byte per piece,
// then the object's bytes at offset 8192, holes where no piece is held.
TEST_F(DiskCacheTest, ObjectFileMatchesTheGoldenFile) {
  const std::vector<ObjectInfo> objects = Objects();
  auto cache = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", objects);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  ASSERT_TRUE((*cache)->TryLockFill());
  ASSERT_TRUE((*cache)->StorePiece(0, 1, Pattern(4096, 4096).data(), 4096).ok());
  const std::string path = (*cache)->entry_dir() + "/00000.cache";
  const std::vector<uint8_t> bytes = FileBytes(path);
  if (std::getenv("KILN_WRITE_GOLDEN") != nullptr) {
    fs::create_directories(fs::path(kGolden).parent_path());
    std::ofstream(kGolden, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  const std::vector<uint8_t> golden = FileBytes(kGolden);
  ASSERT_EQ(bytes.size(), 8192u + 10000u);
  ASSERT_EQ(golden.size(), bytes.size()) << kGolden;
  EXPECT_TRUE(bytes == golden) << path << " differs from " << kGolden;
  // The spec's fields, read independently of the code that wrote them.
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "KILNRCAC");
  EXPECT_EQ(bytes[8], 1);          // version
  EXPECT_EQ(bytes[16 + 1], 0x10);  // piece bytes 4096 = 0x1000, little-endian
  EXPECT_EQ(bytes[24] | bytes[25] << 8, 10000);
  EXPECT_EQ(bytes[32], 3);  // pieces
  EXPECT_EQ(bytes[40], 4);  // ETag length: "e0" with its quotes
  EXPECT_EQ(std::string(bytes.begin() + 64, bytes.begin() + 68), "\"e0\"");
  EXPECT_EQ(std::string(bytes.begin() + 512, bytes.begin() + 512 + objects[0].url.size()),
            objects[0].url);
  EXPECT_EQ(bytes[4096], 0);
  EXPECT_EQ(bytes[4097], 1);
  EXPECT_EQ(bytes[4098], 0);
  EXPECT_EQ(std::vector<uint8_t>(bytes.begin() + 8192 + 4096, bytes.begin() + 8192 + 8192),
            Pattern(4096, 4096));
}

// An object whose ETag changed on the server since its pieces were stored: not read by anyone,
// and the filling process replaces its file with an empty one.
TEST_F(DiskCacheTest, AnObjectOfAnotherVersionIsDroppedNotServed) {
  {
    auto cache = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", Objects());
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    ASSERT_TRUE((*cache)->TryLockFill());
    ASSERT_TRUE((*cache)->StorePiece(0, 0, Pattern(0, 4096).data(), 4096).ok());
    ASSERT_TRUE((*cache)->StorePiece(1, 0, Pattern(0, 4096).data(), 4096).ok());
  }
  const std::vector<ObjectInfo> now = Objects("\"e0-replaced\"");
  auto reader = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", now);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  std::vector<uint8_t> got(100);
  EXPECT_FALSE((*reader)->Read(now[0], 0, 100, got.data())) << "stale piece served";
  EXPECT_TRUE((*reader)->Read(now[1], 0, 100, got.data())) << "the unchanged object";
  ASSERT_TRUE((*reader)->TryLockFill());
  EXPECT_EQ((*reader)->stats().pieces_held, 1u);
  ASSERT_TRUE((*reader)->StorePiece(0, 0, Pattern(1, 4096).data(), 4096).ok());
  ASSERT_TRUE((*reader)->Read(now[0], 0, 100, got.data()));
  EXPECT_EQ(got, Pattern(1, 100));
}

// A damaged header (a file cut short, foreign bytes): a miss, and the filler rewrites it.
TEST_F(DiskCacheTest, ADamagedObjectFileIsAMissThenRewritten) {
  std::string path;
  {
    auto cache = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", Objects());
    ASSERT_TRUE(cache.ok());
    ASSERT_TRUE((*cache)->TryLockFill());
    ASSERT_TRUE((*cache)->StorePiece(1, 0, Pattern(0, 4096).data(), 4096).ok());
    path = (*cache)->entry_dir() + "/00001.cache";
  }
  fs::resize_file(path, 100);
  auto cache = DiskCache::Open(Opts(), "http://127.0.0.1:9/ds", Objects());
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  std::vector<uint8_t> got(100);
  EXPECT_FALSE((*cache)->Read(Objects()[1], 0, 100, got.data()));
  ASSERT_TRUE((*cache)->TryLockFill());
  EXPECT_EQ(fs::file_size(path), 8192u + 4096u);
  EXPECT_EQ((*cache)->stats().pieces_held, 0u);
}

// Capacity: the directory's bytes (every entry) stay within the limit; when full, entries of
// other datasets that no one has open go, least recently opened first, and nothing the cache did
// not make is touched.
TEST_F(DiskCacheTest, EvictsOnlyIdleEntriesItMadeAndNeverForeignFiles) {
  const std::string foreign = dir_ + "/my-notes.txt";
  std::ofstream(foreign) << "the user's file";
  auto entry_of = [&](const std::string& url) {
    auto c = DiskCache::Open(Opts(), url, {{url + "/shard-00000.kiln", 4096 * 4, "\"x\""}});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE((*c)->TryLockFill());
    for (uint64_t p = 0; p < 4; ++p) {
      EXPECT_TRUE((*c)->StorePiece(0, p, Pattern(p * 4096, 4096).data(), 4096).ok());
    }
    return *c;
  };
  std::string old_dir, busy_dir;
  {
    std::shared_ptr<DiskCache> old_one = entry_of("http://127.0.0.1:9/old");
    old_dir = old_one->entry_dir();
    std::ofstream(old_dir + "/not-ours") << "x";  // a file in its entry the cache did not make
  }
  std::shared_ptr<DiskCache> busy = entry_of("http://127.0.0.1:9/busy");  // stays open
  busy_dir = busy->entry_dir();
  // A newer entry, closed: opened after `old`, so `old` goes first.
  { std::shared_ptr<DiskCache> newer = entry_of("http://127.0.0.1:9/newer"); }
  const uint64_t usage = busy->DirectoryUsage();
  ASSERT_GT(usage, 3u * 4 * 4096);

  // Room for the new dataset's first piece only by evicting one idle entry.
  auto mine = DiskCache::Open(Opts(usage + 4096), "http://127.0.0.1:9/ds", Objects());
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  // MakeRoom runs in the fill thread; here through StartFill against a server that does not
  // exist: it evicts for the first piece, then its GET fails, which ends the fill.
  RemoteOptions ro;
  ro.max_retries = 0;
  ro.connect_timeout_ms = 200;
  (*mine)->StartFill(ro, 1);
  ASSERT_TRUE((*mine)->WaitFilled(30000));
  const DiskCache::Stats s = (*mine)->stats();
  EXPECT_EQ(s.evicted_entries, 1u) << s.fill_error;
  EXPECT_FALSE(s.fill_error.empty()) << "the GET to example.invalid should have failed";
  EXPECT_TRUE(fs::exists(foreign)) << "a file the cache did not make was removed";
  EXPECT_FALSE(fs::exists(old_dir + "/00000.cache")) << "the least recently opened entry stays";
  EXPECT_TRUE(fs::exists(old_dir + "/not-ours")) << "a foreign file in an entry was removed";
  EXPECT_TRUE(fs::exists(busy_dir + "/00000.cache")) << "an entry in use was evicted";
}

TEST_F(DiskCacheTest, FullDirectoryAdmitsNothingMore) {
  auto c = DiskCache::Open(Opts(1), "http://127.0.0.1:9/ds", Objects());
  ASSERT_TRUE(c.ok());
  RemoteOptions ro;
  ro.max_retries = 0;
  (*c)->StartFill(ro, 1);
  ASSERT_TRUE((*c)->WaitFilled(30000));
  const DiskCache::Stats s = (*c)->stats();
  EXPECT_EQ(s.fill_pieces, 0u);
  EXPECT_TRUE(s.fill_error.empty()) << "a full cache is not an error: " << s.fill_error;
}

// More objects than the cache keeps descriptors for (256 in a process): all are cached and
// read; those past the limit open their file per access. (A dataset of thousands of shards must
// not run the process out of descriptors.)
TEST_F(DiskCacheTest, ThousandsOfShardsDoNotExhaustFileDescriptors) {
  // The usual default soft limit, whatever this shell has: 1200 files kept open would pass it.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 1024);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  struct Restore {
    rlimit r;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &r); }
  } restore{saved};
  std::vector<ObjectInfo> objects;
  for (int i = 0; i < 1200; ++i) {
    objects.push_back({"http://127.0.0.1:9/many/shard-" + std::to_string(i) + ".kiln", 4096,
                       "\"m" + std::to_string(i) + "\""});
  }
  auto cache = DiskCache::Open(Opts(), "http://127.0.0.1:9/many", objects);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  ASSERT_TRUE((*cache)->TryLockFill());
  for (uint32_t i : {0u, 255u, 256u, 1199u}) {
    ASSERT_TRUE((*cache)->StorePiece(i, 0, Pattern(i, 4096).data(), 4096).ok()) << i;
    std::vector<uint8_t> got(100);
    ASSERT_TRUE((*cache)->Read(objects[i], 10, 100, got.data())) << i;
    EXPECT_EQ(got, Pattern(i + 10, 100)) << i;
  }
  EXPECT_EQ((*cache)->stats().pieces_held, 4u);
  EXPECT_EQ((*cache)->stats().pieces_total, 1200u);
}

TEST_F(DiskCacheTest, BadDirectoryOrPieceSizeIsRefusedByName) {
  DiskCache::Options o = Opts();
  o.dir = "/etc/passwd/cache";
  auto c = DiskCache::Open(o, "http://127.0.0.1:9/ds", Objects());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/etc/passwd/cache"), std::string::npos)
      << c.status().ToString();
  o = Opts();
  o.piece_bytes = 5000;
  c = DiskCache::Open(o, "http://127.0.0.1:9/ds", Objects());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::remote
