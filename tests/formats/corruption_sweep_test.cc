// Corruption sweep (field cases B21, B23, B27a): flips one byte at every structural
// boundary of every storage format and at ~200 seeded random positions, and truncates shards at
// every interesting length. For each damaged dataset:
//  - VerifyDataset (deep) reports at least one problem naming the damaged file, and the record
//    and offset when the flip is inside a record or an index entry field that locates it;
//  - Dataset::Open + ReadSample of every sample either fail with a message naming the damaged
//    file, or return exactly the original bytes and label: never wrong bytes.
//  - Dataset::Key of every sample either fails naming the damaged file or returns the original
//    key (shards check the index checksum, HDF5 the keys checksum, LMDB the value header);
//  - a flip anywhere in kiln.json is caught (manifest_xxh3_64), by verify and at open.
// Flips to bytes no reader interprets (padding, reserved fields) must still be caught by the
// whole-file hash, and the reader must return the original bytes.
// Flips that may hit a third-party library's own structures (LMDB pages, HDF5 metadata) run in a
// child process with an alarm, so a crash or a hang fails that flip rather than the binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/manifest.h"
#include "formats/shards/shard_reader.h"
#include "formats/verifier.h"
#if KILN_HAVE_HDF5
#include "formats/hdf5/hdf5_format.h"
#include "formats/hdf5/hdf5_inspector.h"
#endif
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSamples = 12;

TensorSchema Schema() { return testing::MakeSchema(8, 8, 3); }

// Sample i: half compressible (runs), half random, so zstd datasets hold both codecs.
std::vector<uint8_t> SampleBytes(uint64_t i) {
  std::vector<uint8_t> raw(Schema().sample_bytes());
  std::mt19937 rng(static_cast<uint32_t>(1000 + i));
  for (size_t j = 0; j < raw.size(); ++j) {
    raw[j] = (i % 2 == 0) ? static_cast<uint8_t>((j / 16) * 7 + i) : static_cast<uint8_t>(rng());
  }
  return raw;
}
int64_t LabelOf(uint64_t i) { return static_cast<int64_t>(i % 3); }
std::string KeyOf(uint64_t i) { return "img/" + std::to_string(1000 + i) + ".png"; }

// Where a flip lands, and what the verifier must say about it.
struct Flip {
  std::string file;          // damaged file (absolute path in the work directory)
  uint64_t pos = 0;          // byte offset in that file
  uint8_t mask = 0x01;       // XORed into the byte
  std::string what;          // for messages: "shard 1 index entry 2 field label"
  int64_t record = -1;       // record the verifier must name (-1: only the file)
  bool need_offset = false;  // the problem naming `record` must carry an offset
};

class CorruptionSweep : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = (fs::temp_directory_path() /
             ("kiln_sweep_" + std::to_string(::getpid()) + "_" + info->name()))
                .string();
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = root_ + "/ds";
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& format, const char* compression, uint64_t shard_size) {
    DatasetWriterOptions o;
    o.schema = Schema();
    o.format = format;
    o.shard_size_bytes = shard_size;
    Result<Compression> codec = Compression::Parse(compression);
    ASSERT_TRUE(codec.ok()) << codec.status().ToString();
    Manifest m;
    m.classes = {"a", "b", "c"};
    auto finished = testing::WriteTestDataset(
        dir_, o, *codec, kSamples,
        [](uint64_t i) {
          return testing::TestSample{SampleBytes(i), LabelOf(i), KeyOf(i)};
        },
        m);
    ASSERT_TRUE(finished.ok()) << finished.status().ToString();
    manifest_ = *finished;
    manifest_path_ = dir_ + "/" + kManifestFileName;
  }

  // Problems with the damaged dataset, as text; empty when every expectation holds.
  std::vector<std::string> Check(const Flip& f) const {
    std::vector<std::string> failures;
    char mask[8];
    std::snprintf(mask, sizeof(mask), "0x%02x", f.mask);
    const std::string where =
        f.what + " (byte " + std::to_string(f.pos) + " of " + f.file + ", mask " + mask + "): ";
    const bool manifest_flip = f.file == manifest_path_;
    VerifyOptions options;
    options.deep = true;
    const VerifyReport report = VerifyDataset(dir_, options);
    bool named_file = false, named_record = false;
    for (const VerifyProblem& p : report.problems) {
      if (p.file == f.file) named_file = true;
      if (p.file == f.file && p.record == f.record && (!f.need_offset || p.offset >= 0)) {
        named_record = true;
      }
    }
    // A damaged manifest may show as a problem of a file it describes (its size, its hash).
    if (manifest_flip && !report.ok()) named_file = true;
    if (!named_file) {
      failures.push_back(where + "verify did not name the file:\n" + VerifyReportToText(report));
    }
    if (f.record >= 0 && !named_record) {
      failures.push_back(where + "verify did not name record " + std::to_string(f.record) + ":\n" +
                         VerifyReportToText(report));
    }
    ReadBack(f, where, &failures);
    return failures;
  }

  // The reader either names the damaged file or returns the original bytes and labels.
  void ReadBack(const Flip& f, const std::string& where, std::vector<std::string>* failures) const {
    const bool manifest_flip = f.file == manifest_path_;
    auto names_damage = [&](const std::string& msg) {
      if (msg.find(f.file) != std::string::npos) return true;
      // A damaged manifest may make a listed file look wrong: naming that file is right too.
      return manifest_flip && msg.find(dir_) != std::string::npos;
    };
    Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir_);
    if (!ds.ok()) {
      if (!names_damage(ds.status().message())) {
        failures->push_back(where +
                            "Open failed without naming the file: " + ds.status().ToString());
      }
      return;
    }
    // A damaged manifest may open with another sample count or schema (LMDB checks values
    // against the schema when they are read): then every read must fail.
    RecordDecoder decoder;
    std::vector<uint8_t> out((*ds)->schema().sample_bytes());
    for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
      int64_t label = -1;
      std::fill(out.begin(), out.end(), 0);
      Status s = (*ds)->ReadSample(i, &decoder, out.data(), &label);
      if (!s.ok()) {
        if (!names_damage(s.message())) {
          failures->push_back(where + "ReadSample(" + std::to_string(i) +
                              ") failed without naming the file: " + s.ToString());
        }
        continue;
      }
      if (i >= kSamples || out != SampleBytes(i) || label != LabelOf(i)) {
        failures->push_back(where + "ReadSample(" + std::to_string(i) +
                            ") returned WRONG bytes or label (label " + std::to_string(label) +
                            ") without an error");
      }
      Result<std::string> key = (*ds)->Key(i);
      if (key.ok() && *key != KeyOf(i)) {
        failures->push_back(where + "Key(" + std::to_string(i) + ") returned a WRONG key '" + *key +
                            "' without an error");
      } else if (!key.ok() && !names_damage(key.status().message())) {
        failures->push_back(where + "Key(" + std::to_string(i) +
                            ") failed without naming the "
                            "file: " +
                            key.status().ToString());
      }
    }
  }

  // Applies `f`, checks, restores the file. `isolate` runs the checks in a child process, so
  // that a crash inside a third-party library (LMDB trusts its pages) fails one flip, not the
  // whole test binary.
  void Run(const Flip& f, bool isolate) {
    std::vector<uint8_t> bytes = testing::ReadFileBytes(f.file);
    ASSERT_LT(f.pos, bytes.size()) << f.what;
    const std::vector<uint8_t> original = bytes;
    bytes[f.pos] ^= f.mask;
    testing::WriteFileBytes(f.file, bytes);
    std::vector<std::string> failures;
    if (!isolate) {
      failures = Check(f);
    } else {
      failures = CheckInChild(f);
    }
    testing::WriteFileBytes(f.file, original);
    ++flips_;
    for (const std::string& msg : failures) ADD_FAILURE() << msg;
  }

  std::vector<std::string> CheckInChild(const Flip& f) const {
    int fds[2];
    if (::pipe(fds) != 0) return {"pipe failed"};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ::alarm(60);  // a hang (a library looping on damaged metadata) ends as SIGALRM
      std::string text;
      for (const std::string& m : Check(f)) text += m + '\x1e';
      size_t done = 0;
      while (done < text.size()) {
        const ssize_t n = ::write(fds[1], text.data() + done, text.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::vector<std::string> failures;
    size_t start = 0;
    for (size_t end; (end = text.find('\x1e', start)) != std::string::npos; start = end + 1) {
      failures.push_back(text.substr(start, end - start));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      // The child ends with _exit(0); anything else is a library (or a sanitizer) ending it.
      failures.push_back(f.what + " (byte " + std::to_string(f.pos) + " of " + f.file +
                         "): verify or read EXITED with status " +
                         std::to_string(WEXITSTATUS(status)));
    }
    if (WIFSIGNALED(status)) {
      failures.push_back(f.what + " (byte " + std::to_string(f.pos) + " of " + f.file +
                         "): verify or read " +
                         (WTERMSIG(status) == SIGALRM
                              ? std::string("HUNG (60 s)")
                              : "CRASHED with signal " + std::to_string(WTERMSIG(status))));
    }
    return failures;
  }

  // Flips bytes of the manifest text: every digit (sizes, counts, hashes, schema) and every
  // fourth byte of the rest (keys, names, punctuation), then checks them.
  void SweepManifest(bool isolate) {
    const std::vector<uint8_t> text = testing::ReadFileBytes(manifest_path_);
    for (uint64_t p = 0; p < text.size(); ++p) {
      if (!std::isxdigit(text[p]) && p % 4 != 0) continue;
      // The flipped line, for messages.
      uint64_t b = p, e = p;
      while (b > 0 && text[b - 1] != '\n') --b;
      while (e < text.size() && text[e] != '\n') ++e;
      std::string line(text.begin() + static_cast<std::ptrdiff_t>(b),
                       text.begin() + static_cast<std::ptrdiff_t>(e));
      line[p - b] = static_cast<char>(line[p - b] ^ 0x01);
      Flip f{manifest_path_, p, 0x01, "manifest byte " + std::to_string(p) + " [" + line + "]"};
      Run(f, isolate);
    }
  }

  void RandomFlips(const std::vector<std::string>& files, int count, uint32_t seed, bool isolate) {
    std::mt19937 rng(seed);
    for (int n = 0; n < count; ++n) {
      const std::string& file = files[rng() % files.size()];
      const uint64_t size = fs::file_size(file);
      Flip f{file, rng() % size, static_cast<uint8_t>(1 + rng() % 255),
             "random flip " + std::to_string(n)};
      Run(f, isolate);
    }
  }

  std::string root_, dir_, manifest_path_;
  Manifest manifest_;
  int flips_ = 0;
};

// Adds the structural flips of one shard: each header field, each field of the index entries of
// records 0, 1 and the last, each record's first, middle and last payload byte, key bytes,
// padding and each footer field.
void ShardFlips(const std::string& path, std::vector<Flip>* flips) {
  auto opened = ShardReader::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const ShardReader& r = **opened;
  const uint64_t size = r.file_bytes();
  struct Field {
    uint64_t at;
    const char* name;
  };
  const std::string name = fs::path(path).filename().string();
  for (Field h : std::initializer_list<Field>{{0, "magic"},
                                              {7, "magic end"},
                                              {8, "major"},
                                              {10, "minor"},
                                              {12, "flags"},
                                              {16, "header_size"},
                                              {20, "alignment"},
                                              {24, "dtype"},
                                              {25, "layout"},
                                              {26, "channels"},
                                              {28, "height"},
                                              {32, "width"},
                                              {36, "shard_index"},
                                              {40, "first_sample"},
                                              {48, "reserved"},
                                              {55, "reserved end"},
                                              {56, "header_checksum"}}) {
    flips->push_back({path, h.at, 0x01, name + " header " + h.name});
  }
  const uint64_t n = r.record_count();
  for (uint64_t i = 0; i < n; ++i) {
    const ShardIndexEntry e = r.entry(i);
    const std::string rec = name + " record " + std::to_string(i);
    // Payload: first, middle, last byte; the verifier must name the record and its offset.
    for (uint64_t at : {e.offset, e.offset + e.stored_size / 2, e.offset + e.stored_size - 1}) {
      flips->push_back({path, at, 0x01, rec + " payload", static_cast<int64_t>(i), true});
    }
    // Padding after the record (if any): only the whole-file hash sees it.
    const uint64_t end = e.offset + e.stored_size;
    if (i + 1 < n && r.entry(i + 1).offset > end) {
      flips->push_back({path, end, 0x01, rec + " padding after"});
    }
    if (i != 0 && i != 1 && i + 1 != n) continue;
    const uint64_t eo = r.EntryOffset(i);
    // Fields that locate or check the record: the verifier must name the record.
    for (Field ef : std::initializer_list<Field>{{0, "offset"},
                                                 {8, "stored_size"},
                                                 {12, "raw_size"},
                                                 {16, "label"},
                                                 {24, "checksum"},
                                                 {38, "codec"}}) {
      flips->push_back(
          {path, eo + ef.at, 0x01, rec + " index entry " + ef.name, static_cast<int64_t>(i), true});
    }
    // Key location fields and the reserved byte: covered by the index checksum only.
    for (Field ef :
         std::initializer_list<Field>{{32, "key_offset"}, {36, "key_size"}, {39, "reserved"}}) {
      flips->push_back({path, eo + ef.at, 0x01, rec + " index entry " + ef.name});
    }
    const uint64_t key_at = r.footer().keys_offset + e.key_offset;
    flips->push_back({path, key_at, 0x01, rec + " key first byte"});
    flips->push_back({path, key_at + e.key_size - 1, 0x01, rec + " key last byte"});
  }
  const uint64_t fo = size - kShardFooterBytes;
  for (Field ft : std::initializer_list<Field>{{0, "index_offset"},
                                               {8, "record_count"},
                                               {16, "keys_offset"},
                                               {24, "keys_size"},
                                               {32, "index_checksum"},
                                               {40, "reserved"},
                                               {48, "footer_checksum"},
                                               {56, "magic"},
                                               {63, "magic end"}}) {
    flips->push_back({path, fo + ft.at, 0x01, name + " footer " + ft.name});
  }
  if (fo > r.footer().keys_offset + r.footer().keys_size) {
    flips->push_back({path, fo - 1, 0x01, name + " padding before footer"});
  }
}

TEST_F(CorruptionSweep, ShardsRawAndZstdEveryBoundaryAndRandom) {
  const auto start = std::chrono::steady_clock::now();
  int total_flips = 0;
  for (const char* compression : {"none", "zstd:3"}) {
    SCOPED_TRACE(compression);
    fs::remove_all(dir_);
    // ~6 records of 192 bytes per shard: two shards.
    ASSERT_NO_FATAL_FAILURE(Write("shards", compression, 1600));
    ASSERT_EQ(manifest_.files.size(), 2u) << "the sweep wants exactly 2 shards";
    std::vector<std::string> shards;
    std::vector<Flip> flips;
    for (const DataFileInfo& info : manifest_.files) {
      shards.push_back(dir_ + "/" + info.file);
      ASSERT_NO_FATAL_FAILURE(ShardFlips(shards.back(), &flips));
    }
    if (std::string(compression) != "none") {
      bool any_zstd = false;
      for (const std::string& s : shards) {
        auto r = ShardReader::Open(s);
        for (uint64_t i = 0; i < (*r)->record_count(); ++i) {
          any_zstd |= (*r)->entry(i).codec == Codec::kZstd;
        }
      }
      ASSERT_TRUE(any_zstd) << "the zstd dataset must hold zstd records";
    }
    for (const Flip& f : flips) Run(f, /*isolate=*/false);
    SweepManifest(/*isolate=*/false);
    RandomFlips(shards, 100, compression[0] == 'n' ? 7 : 8, /*isolate=*/false);
    total_flips += flips_;
    flips_ = 0;
  }
  std::printf("[ sweep    ] shards: %d flips, %.1f s\n", total_flips,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// Truncation at every interesting length (B27a): Open fails naming the shard; verify names it.
TEST_F(CorruptionSweep, ShardTruncatedAtEveryInterestingLength) {
  for (const char* compression : {"none", "zstd:3"}) {
    SCOPED_TRACE(compression);
    fs::remove_all(dir_);
    ASSERT_NO_FATAL_FAILURE(Write("shards", compression, 1600));
    for (const DataFileInfo& info : manifest_.files) {
      const std::string path = dir_ + "/" + info.file;
      const std::vector<uint8_t> original = testing::ReadFileBytes(path);
      const uint64_t size = original.size();
      auto r = ShardReader::Open(path);
      ASSERT_TRUE(r.ok());
      const ShardIndexEntry e1 = (*r)->entry(1);
      r->reset();
      for (uint64_t len :
           {uint64_t{0}, uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{65},
            e1.offset + e1.stored_size / 2, (*ShardReader::Open(path))->footer().index_offset,
            size - 64, size - 1}) {
        SCOPED_TRACE(info.file + " cut to " + std::to_string(len));
        testing::WriteFileBytes(path,
                                std::vector<uint8_t>(original.begin(), original.begin() + len));
        Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir_);
        ASSERT_FALSE(ds.ok());
        EXPECT_NE(ds.status().message().find(path), std::string::npos) << ds.status().ToString();
        EXPECT_EQ(ds.status().code(), StatusCode::kCorruption) << ds.status().ToString();
        // The shard alone (no manifest size to compare with) is refused at open too.
        Result<std::unique_ptr<ShardReader>> alone = ShardReader::Open(path);
        EXPECT_FALSE(alone.ok());
        if (!alone.ok()) {
          EXPECT_NE(alone.status().message().find(path), std::string::npos);
        }
        const VerifyReport report = VerifyDataset(dir_, VerifyOptions{});
        bool named = false;
        for (const VerifyProblem& p : report.problems) named |= p.file == path;
        EXPECT_TRUE(named) << VerifyReportToText(report);
        testing::WriteFileBytes(path, original);
      }
    }
  }
}

TEST_F(CorruptionSweep, LmdbValuesManifestAndRandom) {
  if (!IsFormatSupported("lmdb")) GTEST_SKIP() << "built without LMDB";
  const auto start = std::chrono::steady_clock::now();
  for (const char* compression : {"none", "zstd:3"}) {
    SCOPED_TRACE(compression);
    fs::remove_all(dir_);
    ASSERT_NO_FATAL_FAILURE(Write("lmdb", compression, 1 << 20));
    const std::string data = dir_ + "/data.mdb";
    const std::vector<uint8_t> bytes = testing::ReadFileBytes(data);
    std::vector<Flip> flips;
    // Values are found by their magic; the header says which sample (by its key text).
    int found = 0;
    for (size_t pos = 0; pos + 40 <= bytes.size(); ++pos) {
      if (std::memcmp(&bytes[pos], "KLNV", 4) != 0) continue;
      const uint32_t stored = LoadLE32(&bytes[pos + 12]);
      const uint16_t key_size = LoadLE16(&bytes[pos + 32]);
      const std::string key(reinterpret_cast<const char*>(&bytes[pos + 40]), key_size);
      int64_t sample = -1;
      for (uint64_t i = 0; i < kSamples; ++i) {
        if (KeyOf(i) == key) sample = static_cast<int64_t>(i);
      }
      ASSERT_GE(sample, 0) << "value at " << pos << " with key '" << key << "'";
      ++found;
      const std::string rec = "data.mdb sample " + std::to_string(sample);
      struct Field {
        uint64_t at;
        const char* name;
      };
      for (Field f : std::initializer_list<Field>{{0, "magic"},
                                                  {4, "version"},
                                                  {6, "codec"},
                                                  {7, "reserved"},
                                                  {8, "raw_size"},
                                                  {12, "stored_size"},
                                                  {16, "label"},
                                                  {24, "checksum"},
                                                  {32, "key_size"},
                                                  {34, "reserved2"},
                                                  {36, "header_check"}}) {
        flips.push_back({data, pos + f.at, 0x01, rec + " value header " + f.name, sample, true});
      }
      for (uint64_t at : {pos + 40, pos + 40 + key_size - 1}) {
        flips.push_back({data, at, 0x01, rec + " key byte", sample, true});
      }
      const uint64_t s0 = pos + 40 + key_size;
      for (uint64_t at : {s0, s0 + stored / 2, s0 + stored - 1}) {
        flips.push_back({data, at, 0x01, rec + " stored bytes", sample, true});
      }
    }
    ASSERT_EQ(found, static_cast<int>(kSamples));
    // Flips inside values are data to LMDB: checked in this process. Random flips may hit
    // LMDB's own pages, which LMDB trusts: each runs in a child so a crash fails that flip only.
    for (const Flip& f : flips) Run(f, /*isolate=*/false);
    SweepManifest(/*isolate=*/false);
    RandomFlips({data}, 50, compression[0] == 'n' ? 9 : 10, /*isolate=*/true);
  }
  std::printf("[ sweep    ] lmdb: %d flips, %.1f s\n", flips_,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

#if KILN_HAVE_HDF5
// HDF5 (formats/hdf5/hdf5_format.md): every sample's stored bytes (first, middle, last), its label
// and checksum, every key, the superblock, the kiln_manifest attribute's text, the manifest, and
// random flips. Every flip runs in a child: damaged HDF5 metadata is parsed by libhdf5 at open.
TEST_F(CorruptionSweep, Hdf5EveryDatasetManifestAndRandom) {
  if (!IsFormatSupported("hdf5")) GTEST_SKIP() << "built without HDF5";
  const auto start = std::chrono::steady_clock::now();
  for (const char* compression : {"none", "zstd:3"}) {
    SCOPED_TRACE(compression);
    fs::remove_all(dir_);
    ASSERT_NO_FATAL_FAILURE(Write("hdf5", compression, 1 << 20));
    const std::string data = dir_ + "/" + kHdf5DataFileName;
    Result<Hdf5Layout> inspected = Hdf5Inspector::Inspect(data, Schema(), kSamples, true);
    ASSERT_TRUE(inspected.ok()) << inspected.status().ToString();
    const Hdf5Layout& l = *inspected;
    ASSERT_EQ(l.chunked, std::string(compression) != "none");
    std::vector<Flip> flips;
    for (uint64_t i = 0; i < kSamples; ++i) {
      const std::string rec = "data.h5 sample " + std::to_string(i);
      const int64_t r = static_cast<int64_t>(i);
      const Hdf5Layout::Chunk c = l.Stored(i);
      for (uint64_t at : {c.offset, c.offset + c.size / 2, c.offset + c.size - 1}) {
        flips.push_back({data, at, 0x01, rec + " stored bytes", r, true});
      }
      flips.push_back({data, l.labels_offset + 8 * i, 0x01, rec + " label", r, true});
      flips.push_back({data, l.labels_offset + 8 * i + 7, 0x80, rec + " label sign", r, true});
      flips.push_back({data, l.checksums_offset + 8 * i + 3, 0x01, rec + " checksum", r, true});
      flips.push_back({data, l.keys_offset + i * l.key_width, 0x01, rec + " key first byte"});
      flips.push_back(
          {data, l.keys_offset + (i + 1) * l.key_width - 1, 0x01, rec + " key padding"});
    }
    for (uint64_t at = 0; at < 96; at += 3) {
      flips.push_back({data, at, 0x01, "data.h5 superblock byte " + std::to_string(at)});
    }
    // The kiln_manifest attribute's text (a copy of the manifest without `files`).
    const std::vector<uint8_t> bytes = testing::ReadFileBytes(data);
    const std::string needle = "\"kiln_manifest_version\"";
    const auto found = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
    ASSERT_NE(found, bytes.end()) << "no kiln_manifest attribute text in data.h5";
    const uint64_t attr_at = static_cast<uint64_t>(found - bytes.begin());
    for (uint64_t at = attr_at; at < attr_at + 400 && at < bytes.size(); at += 11) {
      flips.push_back(
          {data, at, 0x01, "data.h5 kiln_manifest attribute byte " + std::to_string(at - attr_at)});
    }
    for (const Flip& f : flips) Run(f, /*isolate=*/true);
    SweepManifest(/*isolate=*/false);
    RandomFlips({data}, 100, compression[0] == 'n' ? 11 : 12, /*isolate=*/true);
  }
  std::printf("[ sweep    ] hdf5: %d flips, %.1f s\n", flips_,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}
#endif

}  // namespace
}  // namespace kiln
