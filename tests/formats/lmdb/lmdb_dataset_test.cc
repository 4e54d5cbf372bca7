// Tests for the LMDB backend (formats/lmdb/lmdb_writer.h, formats/lmdb/lmdb_dataset.h,
// formats/lmdb/lmdb_verifier.h, layout in formats/lmdb/lmdb_format.md): round trips, key order, map
// growth, disk full, corruption (its golden files are checked by tests/formats/golden_test.cc;
// read-only directories without lock.mdb and 16 processes opening at once, for every backend, by
// tests/formats/conformance_test.cc).
// Field case B17: the tests named after it (B25 is in tests/reader/lmdb_loader_test.cc).
#include "formats/lmdb/lmdb_dataset.h"

#include <gtest/gtest.h>
#include <lmdb.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_format.h"
#include "formats/verifier.h"
#include "tests/formats/backend_checks.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TensorSchema Schema(uint32_t h, uint32_t w, uint32_t c) { return testing::MakeSchema(h, w, c); }

// Sample i's raw bytes: compressible pattern, or noise when `noise`.
std::vector<uint8_t> Raw(const TensorSchema& schema, uint64_t i, bool noise = false) {
  return noise ? testing::NoiseBytes(schema, i) : testing::PatternBytes(schema, i, 3);
}

using testing::ClassKey;

struct WriteSpec {
  uint64_t n = 100;
  TensorSchema schema = Schema(4, 4, 3);
  Compression compression;
  bool noise = false;
  uint64_t initial_map_bytes = 0;
};

// Sample i of `spec`: Raw bytes, label i mod 5, ClassKey(i).
testing::SampleMaker Samples(const WriteSpec& spec) {
  const bool noise = spec.noise;
  return testing::PatternSamples(spec.schema, 3, [noise](uint64_t) { return noise; });
}

Status WriteLmdb(const std::string& out, const WriteSpec& spec) {
  DatasetWriterOptions o;
  o.schema = spec.schema;
  o.format = "lmdb";
  o.lmdb_initial_map_bytes = spec.initial_map_bytes;
  Manifest m;
  // Part of the golden files' bytes: the name of the file that first wrote them, kept.
  m.tool = "kiln test (tests/formats/lmdb_dataset_test.cc)";
  return testing::WriteTestDataset(out, o, spec.compression, spec.n, Samples(spec), m).status();
}

void ExpectReadsBack(const std::string& dir, const WriteSpec& spec) {
  testing::ExpectDatasetHolds(dir, spec.n, Samples(spec));
}

// Keys seen by a plain LMDB cursor walk, decoded as sample indices.
std::vector<uint64_t> CursorKeys(const std::string& dir) {
  std::vector<uint64_t> keys;
  MDB_env* env = nullptr;
  EXPECT_EQ(mdb_env_create(&env), 0);
  EXPECT_EQ(mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0644), 0);
  MDB_txn* txn = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), 0);
  MDB_dbi dbi;
  EXPECT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  MDB_cursor* c = nullptr;
  EXPECT_EQ(mdb_cursor_open(txn, dbi, &c), 0);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    EXPECT_EQ(k.mv_size, 8u);
    keys.push_back(DecodeLmdbKey(static_cast<const uint8_t*>(k.mv_data)));
  }
  mdb_cursor_close(c);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return keys;
}

TEST(LmdbFormat, KeysSortAsSampleOrder) {
  uint8_t a[8], b[8];
  const uint64_t pairs[][2] = {{0, 1},
                               {255, 256},
                               {65535, 65536},
                               {(1ull << 32) - 1, 1ull << 32},
                               {(1ull << 56), (1ull << 56) + 1},
                               {UINT64_MAX - 1, UINT64_MAX}};
  for (const auto& p : pairs) {
    EncodeLmdbKey(p[0], a);
    EncodeLmdbKey(p[1], b);
    EXPECT_LT(std::memcmp(a, b, 8), 0) << p[0] << " vs " << p[1];
    EXPECT_EQ(DecodeLmdbKey(a), p[0]);
  }
}

TEST(LmdbFormat, ValueHeaderRoundTripAndChecks) {
  EncodedRecord r;
  r.stored = {1, 2, 3, 4};
  r.raw_size = 4;
  r.label = -7;
  r.key = "a/b.png";
  r.checksum = RecordChecksum(r.stored.data(), 4, -7);
  std::vector<uint8_t> v(LmdbValueBytes(r));
  EncodeLmdbValue(r, v.data());
  EXPECT_EQ(std::memcmp(v.data(), "KLNV", 4), 0);
  Result<LmdbValueHeader> h = DecodeLmdbValueHeader(v.data(), v.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->label, -7);
  EXPECT_EQ(h->stored_size, 4u);
  EXPECT_EQ(LmdbValueKey(v.data(), *h), "a/b.png");
  EXPECT_EQ(LmdbHeaderCheck(v.data(), h->key_size), h->header_check);
  EXPECT_FALSE(DecodeLmdbValueHeader(v.data(), v.size() - 1).ok());  // size disagrees
  v[42] ^= 1;                                                        // a key byte
  EXPECT_NE(LmdbHeaderCheck(v.data(), h->key_size), h->header_check);
  v[0] = 'X';
  EXPECT_EQ(DecodeLmdbValueHeader(v.data(), v.size()).status().code(), StatusCode::kCorruption);
}

TEST(LmdbDataset, RoundTripRawAndZstd) {
  TempDir tmp;
  for (const char* c : {"none", "zstd"}) {
    WriteSpec spec;
    spec.n = 300;
    spec.schema = Schema(8, 8, 3);
    spec.compression = *Compression::Parse(c);
    const std::string out = tmp / c;
    ASSERT_TRUE(WriteLmdb(out, spec).ok());
    EXPECT_TRUE(fs::exists(out + "/data.mdb"));
    EXPECT_TRUE(fs::exists(out + "/lock.mdb"));
    EXPECT_FALSE(fs::exists(out + ".partial"));
    Result<Manifest> m = Manifest::Read(out);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->format, "lmdb");
    ASSERT_EQ(m->files.size(), 1u);  // data.mdb only, never lock.mdb
    EXPECT_EQ(m->files[0].file, "data.mdb");
    EXPECT_EQ(m->files[0].bytes, fs::file_size(out + "/data.mdb"));
    ExpectReadsBack(out, spec);
    const VerifyReport report = VerifyDataset(out, VerifyOptions{true});
    EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
    EXPECT_EQ(report.records_checked, spec.n);
  }
}

TEST(LmdbDataset, KeyOrderEqualsSampleOrder) {
  TempDir tmp;
  for (uint64_t n : {10, 1000, 70000}) {
    WriteSpec spec;
    spec.n = n;
    spec.schema = Schema(1, 1, 1);
    const std::string out = tmp / std::to_string(n);
    ASSERT_TRUE(WriteLmdb(out, spec).ok());
    const std::vector<uint64_t> keys = CursorKeys(out);
    ASSERT_EQ(keys.size(), n);
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(keys[i], i);
    auto ds = Dataset::Open(out);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    EXPECT_EQ(*(*ds)->Key(n - 1), ClassKey(n - 1));
  }
}

// B17: the map starts at 1 MiB and must grow by itself. The case's 2000 noise images of
// 256x256x3 (393 MB) are scaled down to 200 (39 MB) to keep the test fast; same growth path.
TEST(LmdbDataset, FieldCase_B17_MapGrowsFromOneMiB) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 200;
  spec.schema = Schema(256, 256, 3);
  spec.noise = true;
  spec.initial_map_bytes = uint64_t{1} << 20;
  const std::string out = tmp / "ds";
  Status s = WriteLmdb(out, spec);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(fs::file_size(out + "/data.mdb"), spec.n * spec.schema.sample_bytes());
  EXPECT_EQ(CursorKeys(out).size(), spec.n);
  ExpectReadsBack(out, spec);
}

// B17 second part: out of disk (a 16 MiB file size limit in a child) fails naming the path and
// leaves no dataset that claims completeness.
TEST(LmdbDataset, FieldCase_B17_DiskFullNamesPathLeavesNoDataset) {
  TempDir tmp;
  const std::string out = tmp / "ds";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::signal(SIGXFSZ, SIG_IGN);  // writes past the limit fail with EFBIG instead of killing
    struct rlimit rl {
      uint64_t{16} << 20, uint64_t{16} << 20
    };
    ::setrlimit(RLIMIT_FSIZE, &rl);
    WriteSpec spec;
    spec.n = 200;
    spec.schema = Schema(256, 256, 3);
    spec.noise = true;
    Status st = WriteLmdb(out, spec);
    const std::string msg = st.ToString();
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(st.ok() ? 0 : 1);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;)
    msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << msg;
  EXPECT_NE(msg.find("IOError"), std::string::npos) << msg;
  EXPECT_NE(msg.find(out + ".partial/data.mdb"), std::string::npos) << msg;
  // LMDB reports the short write as EIO; the writer names the cause (here the size limit; on a
  // full disk "no space left on the device").
  EXPECT_NE(msg.find("file size limit"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  EXPECT_FALSE(Dataset::Open(out).ok());
}

// Returns the byte offset in data.mdb of sample i's value (found by its key, which follows the
// 40-byte header).
size_t ValueOffset(const std::vector<uint8_t>& file, uint64_t i) {
  const std::string key = ClassKey(i);
  const auto it = std::search(file.begin(), file.end(), key.begin(), key.end());
  EXPECT_NE(it, file.end());
  return static_cast<size_t>(it - file.begin()) - kLmdbValueHeaderBytes;
}

TEST(LmdbDataset, FlippedByteIsNamedByVerifierAndReader) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 100;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteLmdb(out, spec).ok());
  std::vector<uint8_t> file = testing::ReadFileBytes(out + "/data.mdb");
  const size_t value = ValueOffset(file, 17);
  const size_t flipped = value + kLmdbValueHeaderBytes + ClassKey(17).size() + 5;  // a stored byte
  file[flipped] ^= 0x40;
  testing::WriteFileBytes(out + "/data.mdb", file);

  const testing::DamagedRecordErrors e = testing::ExpectDamagedRecordNamed(
      out, out + "/data.mdb", spec.n, 17, static_cast<int64_t>(value));
  EXPECT_NE(e.problem.reason.find(ClassKey(17)), std::string::npos) << e.problem.reason;
  EXPECT_NE(e.read.message().find("data.mdb record 17"), std::string::npos) << e.read.message();
  // The reader names the place as kiln verify does: data.mdb, sample 17, where its value starts,
  // and the dataset key (before, it gave the stored bytes' offset and the LMDB key in hex).
  EXPECT_NE(
      e.read.message().find("(key '" + ClassKey(17) + "', offset " + std::to_string(value) + ")"),
      std::string::npos)
      << e.read.message();

  // A damaged key byte is caught by the header check.
  file[value + kLmdbValueHeaderBytes] ^= 0x01;
  file[flipped] ^= 0x40;
  testing::WriteFileBytes(out + "/data.mdb", file);
  const VerifyReport r2 = VerifyDataset(out, VerifyOptions{});
  bool header = false;
  for (const VerifyProblem& p : r2.problems) {
    header = header || (p.record == 17 && p.reason.find("header check") != std::string::npos);
  }
  EXPECT_TRUE(header) << VerifyReportToText(r2);
}

// LMDB's page header and meta page (liblmdb's mdb.c, 64-bit builds): the page number at byte 0,
// the flags at byte 10 (P_BRANCH 1, P_LEAF 2, P_OVERFLOW 4, P_META 8); in a meta page (pages 0
// and 1) the main database's root page number at byte 128 and the transaction id at byte 144.
constexpr size_t kMdbPage = 4096;
constexpr uint16_t kPageBranch = 1, kPageLeaf = 2, kPageOverflow = 4;

uint16_t PageFlags(const std::vector<uint8_t>& file, size_t page) {
  return static_cast<uint16_t>(file[page * kMdbPage + 10] | file[page * kMdbPage + 11] << 8);
}

uint64_t Le64At(const std::vector<uint8_t>& file, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, file.data() + at, 8);
  return v;
}

// The main database's root page, from the newer of the two meta pages.
size_t RootPage(const std::vector<uint8_t>& file) {
  const size_t meta = Le64At(file, kMdbPage + 144) > Le64At(file, 144) ? 1 : 0;
  return Le64At(file, meta * kMdbPage + 128);
}

// The page of data.mdb that holds sample i's value in the live tree (found through liblmdb, not
// by content: the file also holds stale copies of pages from earlier transactions).
size_t ValuePage(const std::string& dir, uint64_t i) {
  MDB_env* env = nullptr;
  EXPECT_EQ(mdb_env_create(&env), 0);
  EXPECT_EQ(mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0644), 0);
  MDB_txn* txn = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), 0);
  MDB_dbi dbi;
  EXPECT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  uint8_t key[kLmdbKeyBytes];
  EncodeLmdbKey(i, key);
  MDB_val k{kLmdbKeyBytes, key}, v;
  EXPECT_EQ(mdb_get(txn, dbi, &k, &v), 0);
  const uintptr_t start = MappingStartOf(v.mv_data);
  EXPECT_NE(start, 0u);
  const size_t page = (reinterpret_cast<uintptr_t>(v.mv_data) - start) / kMdbPage;
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return page;
}

// Checks that damaged `dir` (sample i of `spec` expected intact or reported) gives errors, never
// an abort or a signal: kiln verify reports a problem naming data.mdb; Open fails with
// Corruption naming data.mdb, or every sample reads back either intact or as a Corruption or
// IOError naming data.mdb. Returns the number of samples that failed (all of them when Open
// failed).
uint64_t ExpectDamageReported(const std::string& dir, const WriteSpec& spec,
                              const std::string& what) {
  const std::string data = dir + "/data.mdb";
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  EXPECT_FALSE(report.ok()) << what;
  bool named = false;
  for (const VerifyProblem& p : report.problems) named = named || p.file == data;
  EXPECT_TRUE(named) << what << "\n" << VerifyReportToText(report);
  auto ds = Dataset::Open(dir);
  if (!ds.ok()) {
    EXPECT_EQ(ds.status().code(), StatusCode::kCorruption)
        << what << ": " << ds.status().ToString();
    EXPECT_NE(ds.status().message().find(data), std::string::npos) << ds.status().message();
    return spec.n;
  }
  const testing::SampleMaker samples = Samples(spec);
  RecordDecoder dec;
  std::vector<uint8_t> buf(spec.schema.sample_bytes());
  uint64_t failed = 0;
  for (uint64_t i = 0; i < spec.n; ++i) {
    int64_t label = 0;
    const Status s = (*ds)->ReadSample(i, &dec, buf.data(), &label);
    if (s.ok()) {
      const testing::TestSample expected = samples(i);
      EXPECT_EQ(buf, expected.raw) << what << ": sample " << i;
      EXPECT_EQ(label, expected.label) << what << ": sample " << i;
      continue;
    }
    ++failed;
    EXPECT_TRUE(s.code() == StatusCode::kCorruption || s.code() == StatusCode::kIOError)
        << what << ": " << s.ToString();
    EXPECT_EQ(s.message().rfind(data, 0), 0u) << what << ": " << s.message();
    EXPECT_EQ(s.location().file, data) << what << ": " << s.message();
  }
  return failed;
}

// Zeroes page `page` of a copy of `src` in `dst`.
void CopyWithZeroedPage(const std::string& src, const std::string& dst, size_t page) {
  fs::remove_all(dst);
  fs::copy(src, dst, fs::copy_options::recursive);
  std::vector<uint8_t> file = testing::ReadFileBytes(dst + "/data.mdb");
  ASSERT_LE((page + 1) * kMdbPage, file.size());
  std::fill(file.begin() + page * kMdbPage, file.begin() + (page + 1) * kMdbPage, 0);
  testing::WriteFileBytes(dst + "/data.mdb", file);
}

// A zeroed page used to abort the process in liblmdb ("mdb.c:5921: Assertion 'IS_LEAF(mp)'
// failed in mdb_cursor_next()") in kiln verify, Dataset::Open and reads. Now: errors naming
// data.mdb, for meta, branch, leaf and overflow pages, and for a truncated file.
TEST(LmdbDataset, ZeroedPagesAndTruncationAreErrorsNotAborts) {
  TempDir tmp;
  // Small values: 20000 entries in about 400 leaf pages under a tree of depth 3 (branch pages
  // below the root). Large noise values (3072 bytes, stored raw): one overflow page each, a few
  // leaf pages under a branch root.
  WriteSpec small;
  small.n = 20000;
  small.schema = Schema(2, 2, 1);
  WriteSpec large;
  large.n = 400;
  large.schema = Schema(32, 32, 3);
  large.noise = true;
  for (const WriteSpec& spec : {small, large}) {
    const std::string src = tmp / ("src" + std::to_string(spec.n));
    ASSERT_TRUE(WriteLmdb(src, spec).ok());
    const std::vector<uint8_t> file = testing::ReadFileBytes(src + "/data.mdb");
    const size_t pages = file.size() / kMdbPage;
    const size_t root = RootPage(file);
    ASSERT_EQ(PageFlags(file, root) & kPageBranch, kPageBranch) << "root page " << root;
    // Pages whose loss must fail some read: the root, and the pages of the first, a middle and
    // the last value (leaf pages for small values, the first overflow page for large ones).
    std::vector<std::pair<size_t, std::string>> must_fail = {{root, "root branch page"}};
    for (const uint64_t i : {uint64_t{0}, spec.n / 2, spec.n - 1}) {
      const size_t page = ValuePage(src, i);
      const uint16_t flags = PageFlags(file, page);
      EXPECT_NE(flags & (spec.noise ? kPageOverflow : kPageLeaf), 0)
          << "page " << page << " of sample " << i;
      must_fail.push_back({page, "page of sample " + std::to_string(i)});
    }
    for (const auto& [page, what] : must_fail) {
      const std::string dir = tmp / "z";
      CopyWithZeroedPage(src, dir, page);
      EXPECT_GT(ExpectDamageReported(dir, spec, what + " (" + std::to_string(page) + ") zeroed"),
                0u);
    }
    // Other pages (meta pages, other branch, leaf and overflow pages, free pages), one at a time
    // (every 5th, every 13th of the large dataset's, to keep the test fast): errors or intact
    // reads.
    int kinds_seen = 0;
    for (size_t page = 0; page < pages; page += spec.noise ? 13 : 5) {
      kinds_seen |= PageFlags(file, page);
      const std::string dir = tmp / "z";
      CopyWithZeroedPage(src, dir, page);
      ExpectDamageReported(dir, spec, "page " + std::to_string(page) + " zeroed");
    }
    EXPECT_NE(kinds_seen & 8, 0);  // meta
    EXPECT_NE(kinds_seen & (spec.noise ? kPageOverflow : kPageBranch | kPageLeaf), 0);
    // Truncated (at a page boundary and mid-page): verify reports it and walks nothing, Open
    // refuses it; neither reads past the end (that was a SIGBUS in kiln verify).
    for (const size_t size : {file.size() / 2 / kMdbPage * kMdbPage, file.size() - 100}) {
      const std::string dir = tmp / "t";
      fs::remove_all(dir);
      fs::copy(src, dir, fs::copy_options::recursive);
      fs::resize_file(dir + "/data.mdb", size);
      const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
      const std::string text = VerifyReportToText(report);
      EXPECT_NE(text.find("truncated"), std::string::npos) << text;
      EXPECT_NE(text.find("records were not checked"), std::string::npos) << text;
      EXPECT_EQ(report.records_checked, 0u) << text;
      EXPECT_EQ(Dataset::Open(dir).status().code(), StatusCode::kCorruption);
    }
  }
}

TEST(LmdbDataset, OpenChecksSizeAndCountAgainstManifest) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 50;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteLmdb(out, spec).ok());
  {
    std::ofstream f(out + "/data.mdb", std::ios::binary | std::ios::app);
    f << 'x';
  }
  auto ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("data.mdb"), std::string::npos);
  fs::resize_file(out + "/data.mdb", fs::file_size(out + "/data.mdb") - 1);
  Result<Manifest> m = Manifest::Read(out);
  ASSERT_TRUE(m.ok());
  m->samples = 51;
  ASSERT_TRUE(m->Write(out).ok());
  ds = Dataset::Open(out);
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find("50 entries"), std::string::npos) << ds.status().message();
  EXPECT_FALSE(VerifyDataset(out, VerifyOptions{}).ok());
  fs::remove(out + "/data.mdb");
  EXPECT_EQ(Dataset::Open(out).status().code(), StatusCode::kNotFound);
}

TEST(LmdbDataset, ThreadsGetTheirOwnTransactionsAndGiveThemBack) {
  TempDir tmp;
  WriteSpec spec;
  spec.n = 500;
  const std::string out = tmp / "ds";
  ASSERT_TRUE(WriteLmdb(out, spec).ok());
  auto opened = LmdbDataset::Open(out, *Manifest::Read(out));
  ASSERT_TRUE(opened.ok());
  const LmdbDataset& ds = **opened;
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        RecordDecoder dec;
        std::vector<uint8_t> buf(spec.schema.sample_bytes());
        for (uint64_t i = t; i < spec.n; i += 4) {
          int64_t label;
          if (!ds.ReadSample(i, &dec, buf.data(), &label).ok() || buf != Raw(spec.schema, i)) ++bad;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(ds.active_read_transactions(), 0u);  // exited threads handed theirs back
    EXPECT_LE(ds.read_transactions(), 5u);         // and new threads reused them
  }
}

}  // namespace
}  // namespace kiln
