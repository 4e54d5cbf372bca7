// Tests for formats/verifier.h, including field cases B21 (every problem named with shard,
// record, offset and reason; verification keeps going) and B23 (checksums catch silent flips).
#include "formats/verifier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/shards/shard_reader.h"
#include "formats/shards/shard_set_writer.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Sample `i` as raw bytes for `schema`; `compressible` picks long runs over random bytes.
std::vector<uint8_t> Raw(const TensorSchema& schema, uint64_t i, bool compressible) {
  std::vector<uint8_t> raw(schema.sample_bytes());
  std::mt19937 rng(static_cast<uint32_t>(i + 1));
  if (schema.dtype == DType::kFloat32) {
    for (size_t k = 0; k < raw.size() / 4; ++k) {
      const float v = 0.25f + static_cast<float>(i) + static_cast<float>(k) / 64.0f;
      std::memcpy(&raw[k * 4], &v, 4);
    }
  } else if (compressible) {
    // A random 24-byte block repeated: literals then matches in the zstd frame.
    for (size_t j = 0; j < raw.size(); ++j) {
      raw[j] = static_cast<uint8_t>((j % 24) * 11 + i * 3);
    }
  } else {
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
  }
  return raw;
}

struct DatasetSpec {
  TensorSchema schema;
  uint64_t samples = 0;
  uint64_t shard_size = 1 << 20;
  const char* compression = "none";
  bool compressible = false;
};

// Keys are fixed-width ("s/r00042.png", 12 bytes) so that shard sizes are easy to compute.
std::string KeyOf(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "s/r%05llu.png", static_cast<unsigned long long>(i));
  return buf;
}

void Write(const std::string& dir, const DatasetSpec& spec) {
  DatasetWriterOptions o;
  o.schema = spec.schema;
  o.shard_size_bytes = spec.shard_size;
  Result<Compression> compression = Compression::Parse(spec.compression);
  ASSERT_TRUE(compression.ok()) << compression.status().ToString();
  Result<Manifest> written =
      testing::WriteTestDataset(dir, o, *compression, spec.samples, [&spec](uint64_t i) {
        return testing::TestSample{Raw(spec.schema, i, spec.compressible),
                                   static_cast<int64_t>(i % 10), KeyOf(i)};
      });
  ASSERT_TRUE(written.ok()) << written.status().ToString();
}

TensorSchema Uint8Schema(uint32_t h, uint32_t w, uint32_t c) {
  return testing::MakeSchema(h, w, c);
}

ShardIndexEntry EntryOf(const std::string& shard, uint64_t i) {
  auto r = ShardReader::Open(shard);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return (*r)->entry(i);
}

uint64_t EntryOffsetOf(const std::string& shard, uint64_t i) {
  auto r = ShardReader::Open(shard);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return (*r)->EntryOffset(i);
}

std::vector<VerifyProblem> ProblemsFor(const VerifyReport& report, const std::string& file) {
  std::vector<VerifyProblem> out;
  for (const VerifyProblem& p : report.problems) {
    if (p.file == file) out.push_back(p);
  }
  return out;
}

const VerifyProblem* FindRecordProblem(const VerifyReport& report, const std::string& file,
                                       int64_t record) {
  for (const VerifyProblem& p : report.problems) {
    if (p.file == file && p.record == record) return &p;
  }
  return nullptr;
}

std::string Dump(const VerifyReport& report) { return VerifyReportToText(report); }

// 3 shards of exactly 100 records of 16 bytes: a 100-record shard is
// AlignUp(64 + 99*64 + 16 + 100*40 + 100*12, 8) + 64 = 11680 bytes; 101 records would not fit.
constexpr uint64_t kB21ShardSize = 11680;
DatasetSpec B21Spec() {
  DatasetSpec spec;
  spec.schema = Uint8Schema(4, 4, 1);
  spec.samples = 300;
  spec.shard_size = kB21ShardSize;
  return spec;
}

TEST(VerifierTest, HealthyDatasetIsOk) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok());
  ASSERT_EQ((*ds)->manifest().files.size(), 3u);
  uint64_t bytes = 0;
  for (const DataFileInfo& f : (*ds)->manifest().files) {
    EXPECT_EQ(f.samples, 100u);
    bytes += f.bytes;
  }
  for (bool deep : {false, true}) {
    const VerifyReport report = VerifyDataset(dir, VerifyOptions{deep});
    EXPECT_TRUE(report.ok()) << Dump(report);
    EXPECT_EQ(report.dir, dir);
    EXPECT_EQ(report.deep, deep);
    EXPECT_EQ(report.samples, 300u);
    EXPECT_EQ(report.files_checked, 3u);
    EXPECT_EQ(report.records_checked, 300u);
    EXPECT_EQ(report.bytes_checked, bytes);
    const std::string text = VerifyReportToText(report);
    EXPECT_EQ(text.rfind("OK: " + dir, 0), 0u) << text;
    EXPECT_EQ(text.find("deep") != std::string::npos, deep) << text;
  }
}

// B21: three kinds of damage in one 3 x 100 dataset. The verifier names every one with shard
// path, record index, byte offset and reason, and keeps going; the reader names the shard and
// record for (a) and (c), and Dataset::Open names shard 2 for (b).
TEST(VerifierTest, FieldCase_B21_EveryProblemNamedWithShardRecordOffsetReason) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard0 = dir + "/" + ShardFileName(0);
  const std::string shard1 = dir + "/" + ShardFileName(1);
  const std::string shard2 = dir + "/" + ShardFileName(2);
  ASSERT_TRUE(fs::exists(shard2));
  ASSERT_FALSE(fs::exists(dir + "/" + ShardFileName(3)));

  // (a) One byte inside the payload of record 17 of shard 1.
  const ShardIndexEntry e17 = EntryOf(shard1, 17);
  const uint64_t damaged_a = e17.offset + 5;
  std::vector<uint8_t> b1 = testing::ReadFileBytes(shard1);
  b1[damaged_a] ^= 0xFF;
  testing::WriteFileBytes(shard1, b1);
  // (c) One byte of the stored_size field (entry bytes 8..11) of record 3's entry in shard 0.
  const uint64_t entry3 = EntryOffsetOf(shard0, 3);
  std::vector<uint8_t> b0 = testing::ReadFileBytes(shard0);
  b0[entry3 + 8] ^= 0x01;  // stored_size 16 -> 17
  testing::WriteFileBytes(shard0, b0);

  // The reader, hitting (a) and (c), names shard and record.
  {
    auto ds = Dataset::Open(dir);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();  // O(files) open does not read records
    RecordDecoder dec;
    std::vector<uint8_t> out(16);
    int64_t label = 0;
    Status a = (*ds)->ReadSample(100 + 17, &dec, out.data(), &label);
    EXPECT_EQ(a.code(), StatusCode::kCorruption);
    EXPECT_NE(a.message().find(shard1 + " record 17 (offset " + std::to_string(e17.offset) + ")"),
              std::string::npos)
        << a.message();
    EXPECT_NE(a.message().find("checksum mismatch"), std::string::npos) << a.message();
    Status c = (*ds)->ReadSample(3, &dec, out.data(), &label);
    EXPECT_EQ(c.code(), StatusCode::kCorruption);
    EXPECT_NE(c.message().find(shard0 + " record 3 (offset " + std::to_string(entry3) + ")"),
              std::string::npos)
        << c.message();
    EXPECT_NE(c.message().find("bad index entry"), std::string::npos) << c.message();
    EXPECT_EQ((*ds)->Key(3).status().code(), StatusCode::kCorruption);
    // Neighbours are unaffected.
    EXPECT_TRUE((*ds)->ReadSample(2, &dec, out.data(), &label).ok());
    EXPECT_TRUE((*ds)->ReadSample(100 + 18, &dec, out.data(), &label).ok());
    EXPECT_TRUE((*ds)->ReadSample(250, &dec, out.data(), &label).ok());
  }

  // (b) The last 10 bytes cut off shard 2.
  const uint64_t size2 = fs::file_size(shard2);
  fs::resize_file(shard2, size2 - 10);
  {
    auto ds = Dataset::Open(dir);
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
    EXPECT_NE(ds.status().message().find(shard2), std::string::npos) << ds.status().message();
    EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status().message();
  }

  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  const std::string text = Dump(report);
  RecordProperty("verify_report", text);  // visible with --gtest_output=json
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.files_checked, 3u) << text;  // kept going past shard 0's problems
  // 99 sound records of shard 0 and all 100 of shard 1 had their checksum computed; shard 2's
  // index could not be trusted.
  EXPECT_EQ(report.records_checked, 199u) << text;
  for (const VerifyProblem& p : report.problems) {
    EXPECT_TRUE(p.file == shard0 || p.file == shard1 || p.file == shard2) << text;
    EXPECT_FALSE(p.reason.empty());
    if (p.record >= 0) {
      EXPECT_TRUE((p.file == shard0 && p.record == 3) || (p.file == shard1 && p.record == 17))
          << "unexpected record problem: " << p.file << " record " << p.record << ": " << p.reason;
    }
  }
  // (a)
  const VerifyProblem* a = FindRecordProblem(report, shard1, 17);
  ASSERT_NE(a, nullptr) << text;
  EXPECT_EQ(a->offset, static_cast<int64_t>(e17.offset)) << text;
  EXPECT_LE(static_cast<uint64_t>(a->offset), damaged_a);
  EXPECT_NE(a->reason.find("checksum mismatch"), std::string::npos) << a->reason;
  // (c)
  const VerifyProblem* c = FindRecordProblem(report, shard0, 3);
  ASSERT_NE(c, nullptr) << text;
  EXPECT_EQ(c->offset, static_cast<int64_t>(entry3)) << text;
  EXPECT_NE(c->reason.find("bad index entry"), std::string::npos) << c->reason;
  EXPECT_NE(c->reason.find("17"), std::string::npos) << c->reason;
  // The damaged index also fails the index checksum, located at the index.
  bool index_problem = false;
  for (const VerifyProblem& p : ProblemsFor(report, shard0)) {
    index_problem |= p.reason.find("index checksum") != std::string::npos && p.offset >= 0;
  }
  EXPECT_TRUE(index_problem) << text;
  // (b)
  bool truncated = false;
  for (const VerifyProblem& p : ProblemsFor(report, shard2)) {
    if (p.reason.find("truncated") != std::string::npos) {
      truncated = true;
      EXPECT_GE(p.offset, 0) << p.reason;
      EXPECT_LE(p.offset, static_cast<int64_t>(size2)) << p.reason;
    }
  }
  EXPECT_TRUE(truncated) << text;
  // The text report has one line per problem naming file, record and offset, then FAILED.
  EXPECT_NE(text.find(shard1 + " record 17 offset " + std::to_string(e17.offset) + ": "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(shard0 + " record 3 offset " + std::to_string(entry3) + ": "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("FAILED: " + dir), std::string::npos) << text;
}

TEST(VerifierTest, FieldCase_B21_IntactShardsHaveNoProblems) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard1 = dir + "/" + ShardFileName(1);
  const ShardIndexEntry e17 = EntryOf(shard1, 17);
  std::vector<uint8_t> b1 = testing::ReadFileBytes(shard1);
  b1[e17.offset] ^= 0x01;
  testing::WriteFileBytes(shard1, b1);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.records_checked, 300u);
  EXPECT_TRUE(ProblemsFor(report, dir + "/" + ShardFileName(0)).empty()) << Dump(report);
  EXPECT_TRUE(ProblemsFor(report, dir + "/" + ShardFileName(2)).empty()) << Dump(report);
  EXPECT_NE(FindRecordProblem(report, shard1, 17), nullptr) << Dump(report);
  for (const VerifyProblem& p : report.problems) {
    EXPECT_EQ(p.file, shard1);
    EXPECT_TRUE(p.record == -1 || p.record == 17) << Dump(report);
  }
}

// The reason of a shard that cannot be opened reads like the others: it starts with what is
// wrong, the location being in the file and offset fields.
TEST(VerifierTest, OpenFailureReasonIsWellFormed) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard2 = dir + "/" + ShardFileName(2);
  fs::resize_file(shard2, fs::file_size(shard2) - 10);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  bool found = false;
  for (const VerifyProblem& p : ProblemsFor(report, shard2)) {
    if (p.reason.find("no footer magic") == std::string::npos) continue;
    found = true;
    EXPECT_EQ(p.reason.rfind("no footer magic", 0), 0u) << "reason: '" << p.reason << "'";
    EXPECT_EQ(p.offset, static_cast<int64_t>(fs::file_size(shard2) - 64));
  }
  EXPECT_TRUE(found) << Dump(report);
}

// B23: a raw float32 dataset with one float's exponent byte flipped. The value is still a finite
// float (decode-only checks pass); the record checksum catches it.
TEST(VerifierTest, FieldCase_B23_FloatExponentFlipCaughtByChecksum) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  DatasetSpec spec;
  spec.schema = Uint8Schema(4, 4, 3);
  spec.schema.dtype = DType::kFloat32;
  spec.samples = 40;
  spec.shard_size = 4096;  // several shards
  Write(dir, spec);
  const std::string shard = dir + "/" + ShardFileName(1);
  const ShardIndexEntry e = EntryOf(shard, 2);
  ASSERT_EQ(e.codec, Codec::kNone);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(shard);
  const uint64_t float_at = e.offset + 4 * 10;  // float 10 of record 2
  float before, after;
  std::memcpy(&before, &bytes[float_at], 4);
  bytes[float_at + 3] ^= 0x01;  // lowest exponent bit lives in byte 2; byte 3 holds 7 more
  std::memcpy(&after, &bytes[float_at], 4);
  ASSERT_TRUE(std::isfinite(after));
  ASSERT_NE(before, after);
  testing::WriteFileBytes(shard, bytes);
  for (bool deep : {false, true}) {
    const VerifyReport report = VerifyDataset(dir, VerifyOptions{deep});
    const VerifyProblem* p = FindRecordProblem(report, shard, 2);
    ASSERT_NE(p, nullptr) << Dump(report);
    EXPECT_EQ(p->offset, static_cast<int64_t>(e.offset));
    EXPECT_NE(p->reason.find("checksum mismatch"), std::string::npos) << p->reason;
  }
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok());
  RecordDecoder dec;
  std::vector<uint8_t> out(spec.schema.sample_bytes());
  int64_t label = 0;
  const uint64_t index = (*ds)->manifest().files[0].samples + 2;
  Status s = (*ds)->ReadSample(index, &dec, out.data(), &label);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(shard + " record 2"), std::string::npos) << s.message();
}

// B23: a zstd dataset with one bit flipped inside a compressed frame. A flip that still
// decodes (to wrong bytes) is chosen when one exists; either way the checksum catches it
// before anything is decoded.
TEST(VerifierTest, FieldCase_B23_ZstdBitFlipCaughtByChecksum) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  DatasetSpec spec;
  spec.schema = Uint8Schema(16, 16, 3);
  spec.samples = 8;
  spec.compression = "zstd:3";
  spec.compressible = true;
  Write(dir, spec);
  const std::string shard = dir + "/" + ShardFileName(0);
  const ShardIndexEntry e = EntryOf(shard, 5);
  ASSERT_EQ(e.codec, Codec::kZstd);
  ASSERT_LT(e.stored_size, e.raw_size);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(shard);
  const std::vector<uint8_t> expected = Raw(spec.schema, 5, true);
  // Search for a bit whose flip still decodes to the right size but to different bytes.
  uint64_t flip_byte = e.offset + e.stored_size / 2;
  uint8_t flip_mask = 0x10;
  RecordDecoder dec;
  std::vector<uint8_t> out(e.raw_size);
  bool silent = false;
  for (uint64_t p = e.offset + 6; p < e.offset + e.stored_size && !silent; ++p) {
    for (int bit = 0; bit < 8 && !silent; ++bit) {
      std::vector<uint8_t> frame(bytes.begin() + e.offset,
                                 bytes.begin() + e.offset + e.stored_size);
      frame[p - e.offset] ^= static_cast<uint8_t>(1 << bit);
      if (dec.Decode(frame.data(), frame.size(), Codec::kZstd, out.data(), out.size()).ok() &&
          out != expected) {
        silent = true;
        flip_byte = p;
        flip_mask = static_cast<uint8_t>(1 << bit);
      }
    }
  }
  RecordProperty("silent_flip_found", silent ? "yes" : "no");
  bytes[flip_byte] ^= flip_mask;
  testing::WriteFileBytes(shard, bytes);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  const VerifyProblem* p = FindRecordProblem(report, shard, 5);
  ASSERT_NE(p, nullptr) << Dump(report);
  EXPECT_EQ(p->offset, static_cast<int64_t>(e.offset));
  EXPECT_NE(p->reason.find("checksum mismatch"), std::string::npos) << p->reason;
  for (const VerifyProblem& q : report.problems) EXPECT_TRUE(q.record == -1 || q.record == 5);
}

// Rewrites the footer's index checksum and footer checksum of `shard`, and the manifest's
// whole-file hash, so that only record-level damage remains.
void Reseal(const std::string& dir, size_t shard_number) {
  const std::string shard = dir + "/" + ShardFileName(static_cast<uint32_t>(shard_number));
  std::vector<uint8_t> b = testing::ReadFileBytes(shard);
  uint8_t* footer = &b[b.size() - kShardFooterBytes];
  const uint64_t index_offset = LoadLE64(footer + 0);
  const uint64_t keys_end = LoadLE64(footer + 16) + LoadLE64(footer + 24);
  StoreLE64(footer + 32, RecordChecksum(&b[index_offset], keys_end - index_offset, 0));
  StoreLE64(footer + 48, RecordChecksum(footer, 48, 0));
  testing::WriteFileBytes(shard, b);
  Result<Manifest> m = Manifest::Read(dir);
  ASSERT_TRUE(m.ok());
  m->files[shard_number].xxh3_64 = RecordChecksum(b.data(), b.size(), 0);
  m->files[shard_number].index_xxh3_64 = LoadLE64(footer + 32);
  ASSERT_TRUE(m->Write(dir).ok());
}

TEST(VerifierTest, DeepModeDecodesEveryRecord) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  DatasetSpec spec;
  spec.schema = Uint8Schema(16, 16, 3);
  spec.samples = 6;
  spec.compression = "zstd";
  spec.compressible = true;
  Write(dir, spec);
  const std::string shard = dir + "/" + ShardFileName(0);
  const uint64_t entry4 = EntryOffsetOf(shard, 4);
  const ShardIndexEntry e = EntryOf(shard, 4);
  ASSERT_EQ(e.codec, Codec::kZstd);
  // Break the zstd frame magic, then re-checksum the record, the index, the footer and the
  // manifest: only decoding can find this.
  std::vector<uint8_t> b = testing::ReadFileBytes(shard);
  std::memset(&b[e.offset], 0, 4);
  StoreLE64(&b[entry4 + 24], RecordChecksum(&b[e.offset], e.stored_size, e.label));
  testing::WriteFileBytes(shard, b);
  Reseal(dir, 0);

  const VerifyReport quick = VerifyDataset(dir, VerifyOptions{false});
  EXPECT_TRUE(quick.ok()) << Dump(quick);
  EXPECT_EQ(quick.records_checked, 6u);
  const VerifyReport deep = VerifyDataset(dir, VerifyOptions{true});
  ASSERT_EQ(deep.problems.size(), 1u) << Dump(deep);
  const VerifyProblem& p = deep.problems[0];
  EXPECT_EQ(p.file, shard);
  EXPECT_EQ(p.record, 4);
  EXPECT_EQ(p.offset, static_cast<int64_t>(e.offset));
  EXPECT_NE(p.reason.find("cannot decode"), std::string::npos) << p.reason;
  EXPECT_NE(p.reason.find("zstd"), std::string::npos) << p.reason;
}

TEST(VerifierTest, UnlistedShardFileIsReported) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  DatasetSpec spec;
  spec.schema = Uint8Schema(4, 4, 1);
  spec.samples = 10;
  Write(dir, spec);
  fs::copy_file(dir + "/" + ShardFileName(0), dir + "/" + ShardFileName(7));
  std::ofstream(dir + "/notes.txt") << "not a shard";
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  ASSERT_EQ(report.problems.size(), 1u) << Dump(report);
  EXPECT_EQ(report.problems[0].file, dir + "/" + ShardFileName(7));
  EXPECT_NE(report.problems[0].reason.find("not listed"), std::string::npos);
}

// A shard of another pack with the same size, place and record count (here one label differs)
// is named as such, besides the whole-file hash (shard_format.md section 11).
TEST(VerifierTest, ShardOfAnotherPackIsReported) {
  TempDir tmp;
  const std::string a = tmp / "a", b = tmp / "b";
  const DatasetSpec spec = B21Spec();
  for (const std::string& dir : {a, b}) {
    DatasetWriterOptions o;
    o.schema = spec.schema;
    o.shard_size_bytes = spec.shard_size;
    const int64_t changed = dir == b ? 5 : -1;
    Result<Manifest> written =
        testing::WriteTestDataset(dir, o, {}, spec.samples, [&spec, changed](uint64_t i) {
          const int64_t label =
              static_cast<int64_t>(i) == changed ? 9 : static_cast<int64_t>(i % 10);
          return testing::TestSample{Raw(spec.schema, i, false), label, KeyOf(i)};
        });
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }
  const std::string shard = b + "/" + ShardFileName(0);
  ASSERT_TRUE(VerifyDataset(b, VerifyOptions{}).ok());
  fs::copy_file(a + "/" + ShardFileName(0), shard, fs::copy_options::overwrite_existing);
  const VerifyReport report = VerifyDataset(b, VerifyOptions{});
  const std::vector<VerifyProblem> problems = ProblemsFor(report, shard);
  ASSERT_EQ(problems.size(), 2u) << Dump(report);
  EXPECT_NE(problems[0].reason.find("hash"), std::string::npos) << Dump(report);
  EXPECT_NE(problems[1].reason.find("belongs to another pack"), std::string::npos) << Dump(report);
  EXPECT_NE(problems[1].reason.find("files[0]"), std::string::npos) << Dump(report);
  EXPECT_EQ(problems[1].offset, static_cast<int64_t>(fs::file_size(shard)) - 64 + 32);
  EXPECT_EQ(report.records_checked, 300u);  // its records are intact: they are a's
}

TEST(VerifierTest, MissingListedShardIsReported) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard1 = dir + "/" + ShardFileName(1);
  fs::remove(shard1);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  ASSERT_EQ(ProblemsFor(report, shard1).size(), 1u) << Dump(report);
  EXPECT_NE(ProblemsFor(report, shard1)[0].reason.find("missing"), std::string::npos);
  EXPECT_EQ(report.records_checked, 200u);  // the other shards are still checked
}

TEST(VerifierTest, MissingManifestStillChecksShards) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  fs::remove(dir + "/kiln.json");
  const std::string shard2 = dir + "/" + ShardFileName(2);
  const ShardIndexEntry e = EntryOf(shard2, 40);
  std::vector<uint8_t> b = testing::ReadFileBytes(shard2);
  b[e.offset + 1] ^= 0x02;
  testing::WriteFileBytes(shard2, b);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  EXPECT_EQ(report.samples, 0u);
  EXPECT_EQ(report.files_checked, 3u);
  EXPECT_EQ(report.records_checked, 300u);
  ASSERT_EQ(report.problems.size(), 2u) << Dump(report);
  EXPECT_EQ(report.problems[0].file, dir + "/kiln.json");
  EXPECT_NE(report.problems[0].reason.find("kiln.json"), std::string::npos);
  EXPECT_EQ(report.problems[1].file, shard2);
  EXPECT_EQ(report.problems[1].record, 40);
  EXPECT_EQ(report.problems[1].offset, static_cast<int64_t>(e.offset));
}

TEST(VerifierTest, MissingDirectoryIsAProblemNotACrash) {
  TempDir tmp;
  const VerifyReport report = VerifyDataset(tmp / "none", VerifyOptions{});
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.files_checked, 0u);
}

TEST(VerifierTest, ManifestMismatchesAreReported) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  Result<Manifest> m = Manifest::Read(dir);
  ASSERT_TRUE(m.ok());
  m->samples = 301;
  m->files[1].xxh3_64 ^= 1;
  ASSERT_TRUE(m->Write(dir).ok());
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  EXPECT_EQ(report.records_checked, 300u);
  ASSERT_EQ(report.problems.size(), 2u) << Dump(report);
  EXPECT_EQ(report.problems[0].file, dir + "/" + ShardFileName(1));
  EXPECT_NE(report.problems[0].reason.find("whole-file hash"), std::string::npos);
  EXPECT_EQ(report.problems[1].file, dir + "/kiln.json");
  EXPECT_NE(report.problems[1].reason.find("301"), std::string::npos);
}

// The whole-file hash runs on its own thread while the records are checked (verifier.cc); the
// report must not show it: a damaged record gives the file's hash problem first, then the
// record's, as when the two ran one after the other, and the same report every time.
TEST(VerifierTest, ProblemsOfOneFileKeepTheirOrder) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard = dir + "/" + ShardFileName(1);
  Result<std::unique_ptr<ShardReader>> reader = ShardReader::Open(shard);
  ASSERT_TRUE(reader.ok());
  const ShardIndexEntry e = (*reader)->entry(3);
  reader->reset();
  std::vector<uint8_t> bytes = testing::ReadFileBytes(shard);
  bytes[e.offset] ^= 0x01;
  testing::WriteFileBytes(shard, bytes);
  for (bool deep : {false, true}) {
    VerifyOptions options;
    options.deep = deep;
    const VerifyReport first = VerifyDataset(dir, options);
    ASSERT_EQ(first.problems.size(), 2u) << Dump(first);
    EXPECT_EQ(first.problems[0].file, shard);
    EXPECT_EQ(first.problems[0].record, -1);
    EXPECT_NE(first.problems[0].reason.find("whole-file hash"), std::string::npos);
    EXPECT_EQ(first.problems[1].file, shard);
    EXPECT_EQ(first.problems[1].record, 3);
    EXPECT_EQ(first.problems[1].offset, static_cast<int64_t>(e.offset));
    for (int run = 0; run < 20; ++run) {
      EXPECT_EQ(Dump(VerifyDataset(dir, options)), Dump(first)) << "run " << run;
    }
  }
}

TEST(VerifierTest, JsonReport) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  Write(dir, B21Spec());
  const std::string shard1 = dir + "/" + ShardFileName(1);
  const ShardIndexEntry e = EntryOf(shard1, 17);
  std::vector<uint8_t> b = testing::ReadFileBytes(shard1);
  b[e.offset] ^= 0x01;
  testing::WriteFileBytes(shard1, b);
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{});
  const nlohmann::json j = nlohmann::json::parse(VerifyReportToJson(report));
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["dir"], dir);
  EXPECT_EQ(j["deep"], false);
  EXPECT_EQ(j["samples"], 300);
  EXPECT_EQ(j["files_checked"], 3);
  EXPECT_EQ(j["records_checked"], 300);
  EXPECT_TRUE(j["bytes_checked"].is_number());
  // Wall time of the verification itself, so that rates exclude the process's start-up.
  ASSERT_TRUE(j["seconds"].is_number());
  EXPECT_GT(j["seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["seconds"].get<double>(), report.seconds);
  ASSERT_TRUE(j["problems"].is_array());
  ASSERT_EQ(j["problems"].size(), report.problems.size());
  bool record_problem = false, file_problem = false;
  for (const auto& p : j["problems"]) {
    ASSERT_TRUE(p.contains("file") && p.contains("record") && p.contains("offset") &&
                p.contains("reason"));
    EXPECT_EQ(p["file"], shard1);
    if (p["record"].is_null()) {
      file_problem = true;  // the whole-file hash
    } else {
      record_problem = true;
      EXPECT_EQ(p["record"], 17);
      EXPECT_EQ(p["offset"], e.offset);
      EXPECT_NE(p["reason"].get<std::string>().find("checksum mismatch"), std::string::npos);
    }
  }
  EXPECT_TRUE(record_problem);
  EXPECT_TRUE(file_problem);
  // A clean report.
  DatasetSpec small;
  small.schema = Uint8Schema(2, 2, 1);
  small.samples = 2;
  Write(tmp / "ok", small);
  const nlohmann::json ok =
      nlohmann::json::parse(VerifyReportToJson(VerifyDataset(tmp / "ok", VerifyOptions{})));
  EXPECT_EQ(ok["ok"], true);
  EXPECT_TRUE(ok["problems"].empty());
}

}  // namespace
}  // namespace kiln
