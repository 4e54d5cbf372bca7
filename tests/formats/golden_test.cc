// Golden files for shard format v1 and kiln.json (tests/data/golden/README.md): (a) writing the
// same inputs again gives byte-identical files, so format drift fails; (b) the checked-in files
// open and read back every byte, label and key.
//
// KILN_REGENERATE_GOLDEN=1 makes the Regenerate test write the files into the source tree
// instead (then review the diff, and update formats/shards/shard_format.md section 7 if the header
// bytes changed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/shards/shard_format.h"
#include "formats/shards/shard_reader.h"
#include "formats/verifier.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kGoldenDir = std::string(KILN_SOURCE_DIR) + "/tests/data/golden";

struct GoldenSample {
  std::vector<uint8_t> raw;
  int64_t label;
  std::string key;
};

struct GoldenDataset {
  std::string name;
  TensorSchema schema;
  const char* compression;
  uint32_t record_alignment;
  uint64_t shard_size_bytes;
  std::vector<GoldenSample> samples;
  std::vector<std::string> expected_files;  // besides kiln.json
};

TensorSchema Uint8Hwc(uint32_t h, uint32_t w, uint32_t c) {
  TensorSchema s;
  s.dtype = DType::kUint8;
  s.layout = Layout::kHWC;
  s.height = h;
  s.width = w;
  s.channels = c;
  return s;
}

// Keys: one of them non-ASCII, "café/猫.png" in UTF-8.
const std::string kCafeCatKey = "caf\xC3\xA9/\xE7\x8C\xAB.png";

std::vector<GoldenDataset> GoldenDatasets() {
  std::vector<GoldenDataset> out;
  // raw: 3 samples of 2x3x1 uint8, no compression, default alignment, one shard.
  out.push_back({"raw",
                 Uint8Hwc(2, 3, 1),
                 "none",
                 64,
                 uint64_t{128} << 20,
                 {{{0x00, 0x01, 0x02, 0x03, 0x04, 0x05}, 0, "cat/0.png"},
                  {{0x10, 0x11, 0x12, 0x13, 0x14, 0x15}, 1, "dog/1.png"},
                  {{0xFF, 0xFE, 0xFD, 0xFC, 0xFB, 0xFA}, 2, kCafeCatKey}},
                 {"shard-00000.kiln"}});
  // zstd: 3 samples of 8x8x3 uint8 at zstd:3; samples 0 and 1 compress, sample 2 (bytes of a
  // fixed linear congruential generator) does not and is stored raw.
  GoldenDataset z{"zstd", Uint8Hwc(8, 8, 3), "zstd:3", 64, uint64_t{128} << 20, {}, {}};
  std::vector<uint8_t> s0(192), s1(192), s2(192);
  uint32_t lcg = 12345;
  for (size_t i = 0; i < 192; ++i) {
    s0[i] = static_cast<uint8_t>(10 * (i / 24));           // grey rows 0, 10, ..., 70
    s1[i] = static_cast<uint8_t>((i % 3) == 0 ? 200 : 7);  // a red image
    lcg = lcg * 1103515245u + 12345u;
    s2[i] = static_cast<uint8_t>(lcg >> 16);
  }
  z.samples = {{s0, 2, "bird/rows.png"}, {s1, 0, "cat/red.png"}, {s2, 1, kCafeCatKey}};
  z.expected_files = {"shard-00000.kiln"};
  out.push_back(z);
  // split: 5 samples of 2x3x1 uint8 with 256-byte alignment and 1 KiB shards: 3 + 2 records.
  GoldenDataset split{"split", Uint8Hwc(2, 3, 1), "none", 256, 1024, {}, {}};
  for (int i = 0; i < 5; ++i) {
    std::vector<uint8_t> raw(6);
    for (int j = 0; j < 6; ++j) raw[j] = static_cast<uint8_t>(0x20 * i + j);
    split.samples.push_back({raw, static_cast<int64_t>(i % 3),
                             i == 3 ? kCafeCatKey : "split/" + std::to_string(i) + ".png"});
  }
  split.expected_files = {"shard-00000.kiln", "shard-00001.kiln"};
  out.push_back(split);
  return out;
}

Manifest GoldenManifest(const GoldenDataset& d) {
  Manifest m;
  m.tool = "kiln golden (tests/formats/golden_test.cc)";
  m.classes = {"cat", "dog", "bird"};
  m.compression = d.compression;
  m.source_json = R"({"generator":"tests/formats/golden_test.cc","dataset":")" + d.name + "\"}";
  return m;
}

Status Generate(const GoldenDataset& d, const std::string& out_dir) {
  DatasetWriterOptions o;
  o.schema = d.schema;
  o.record_alignment = d.record_alignment;
  o.shard_size_bytes = d.shard_size_bytes;
  o.overwrite = true;
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(out_dir, o));
  KILN_ASSIGN_OR_RETURN(Compression compression, Compression::Parse(d.compression));
  RecordEncoder encoder(compression);
  for (const GoldenSample& s : d.samples) {
    EncodedRecord rec;
    KILN_RETURN_IF_ERROR(encoder.Encode(s.raw.data(), s.raw.size(), s.label, s.key, &rec));
    KILN_RETURN_IF_ERROR(writer->Add(rec));
  }
  Result<Manifest> m = writer->Finish(GoldenManifest(d));
  return m.status();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

bool Regenerating() {
  const char* v = std::getenv("KILN_REGENERATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

TEST(GoldenTest, Regenerate) {
  if (!Regenerating()) GTEST_SKIP() << "set KILN_REGENERATE_GOLDEN=1 to rewrite " << kGoldenDir;
  fs::create_directories(kGoldenDir);
  for (const GoldenDataset& d : GoldenDatasets()) {
    Status s = Generate(d, kGoldenDir + "/" + d.name);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
}

// (a) Format drift: the writer must reproduce every golden file byte for byte.
TEST(GoldenTest, WriterReproducesGoldenFilesByteForByte) {
  const std::string tmp =
      (fs::temp_directory_path() / ("kiln_golden_" + std::to_string(::getpid()))).string();
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const GoldenDataset& d : GoldenDatasets()) {
    SCOPED_TRACE(d.name);
    const std::string golden = kGoldenDir + "/" + d.name;
    ASSERT_TRUE(fs::exists(golden + "/kiln.json"))
        << golden << " is missing: run the tests with KILN_REGENERATE_GOLDEN=1";
    const std::string fresh = tmp + "/" + d.name;
    Status s = Generate(d, fresh);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<std::string> expected = d.expected_files;
    expected.push_back("kiln.json");
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(Names(fresh), expected);
    EXPECT_EQ(Names(golden), expected);
    for (const std::string& name : expected) {
      const std::vector<uint8_t> want = ReadAll(golden + "/" + name);
      const std::vector<uint8_t> got = ReadAll(fresh + "/" + name);
      EXPECT_EQ(got.size(), want.size()) << name;
      const auto diff = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
      EXPECT_TRUE(diff.first == got.end() && diff.second == want.end())
          << d.name << "/" << name << " differs from the golden file at byte "
          << (diff.first - got.begin())
          << " (format drift: if intended, bump the version and regenerate)";
    }
  }
  fs::remove_all(tmp);
}

// (b) The checked-in files read back exactly.
TEST(GoldenTest, GoldenFilesReadBackEveryByteLabelAndKey) {
  for (const GoldenDataset& d : GoldenDatasets()) {
    SCOPED_TRACE(d.name);
    const std::string golden = kGoldenDir + "/" + d.name;
    auto ds = Dataset::Open(golden);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    const Manifest& m = (*ds)->manifest();
    EXPECT_EQ(m.format, "shards");
    EXPECT_EQ(m.schema, d.schema);
    EXPECT_EQ(m.samples, d.samples.size());
    EXPECT_EQ(m.compression, d.compression);
    EXPECT_EQ(m.record_alignment, d.record_alignment);
    EXPECT_EQ(m.classes, (std::vector<std::string>{"cat", "dog", "bird"}));
    EXPECT_EQ(m.files.size(), d.expected_files.size());
    RecordDecoder decoder;
    std::vector<uint8_t> out(d.schema.sample_bytes());
    for (uint64_t i = 0; i < d.samples.size(); ++i) {
      int64_t label = -100;
      std::fill(out.begin(), out.end(), 0xEE);
      Status s = (*ds)->ReadSample(i, &decoder, out.data(), &label);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out, d.samples[i].raw) << "sample " << i;
      EXPECT_EQ(label, d.samples[i].label) << "sample " << i;
      Result<std::string> key = (*ds)->Key(i);
      ASSERT_TRUE(key.ok());
      EXPECT_EQ(*key, d.samples[i].key) << "sample " << i;
    }
    const VerifyReport report = VerifyDataset(golden, VerifyOptions{true});
    EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
  }
}

TEST(GoldenTest, ZstdGoldenMixesCodecs) {
  auto reader = ShardReader::Open(kGoldenDir + "/zstd/shard-00000.kiln");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->entry(0).codec, Codec::kZstd);
  EXPECT_EQ((*reader)->entry(1).codec, Codec::kZstd);
  EXPECT_EQ((*reader)->entry(2).codec, Codec::kNone);
}

// formats/shards/shard_format.md section 7 quotes these first 64 bytes of raw/shard-00000.kiln.
TEST(GoldenTest, FirstBytesMatchTheSpec) {
  const std::vector<uint8_t> b = ReadAll(kGoldenDir + "/raw/shard-00000.kiln");
  ASSERT_GE(b.size(), 64u);
  const uint8_t expected[56] = {
      'K',  'I',  'L',  'N',  'S', 'H', 'R', 'D',  // magic
      0x01, 0x00, 0x00, 0x00,                      // version 1.0
      0x00, 0x00, 0x00, 0x00,                      // flags
      0x40, 0x00, 0x00, 0x00,                      // header size 64
      0x40, 0x00, 0x00, 0x00,                      // record alignment 64
      0x01, 0x01, 0x01, 0x00,                      // uint8, hwc, 1 channel
      0x02, 0x00, 0x00, 0x00,                      // height 2
      0x03, 0x00, 0x00, 0x00,                      // width 3
      0x00, 0x00, 0x00, 0x00,                      // shard index 0
      0,    0,    0,    0,    0,   0,   0,   0,    // first sample 0
      0,    0,    0,    0,    0,   0,   0,   0,    // reserved
  };
  EXPECT_EQ(std::memcmp(b.data(), expected, sizeof(expected)), 0);
  EXPECT_EQ(LoadLE64(&b[56]), RecordChecksum(b.data(), 56, 0));
  EXPECT_EQ(std::memcmp(&b[b.size() - 8], "KILNSEND", 8), 0);
}

}  // namespace
}  // namespace kiln
