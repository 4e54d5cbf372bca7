// Golden files for every storage backend (tests/data/golden*/README.md), one parameterised suite
// over the format registry's names: (a) writing the same inputs again gives byte-identical files,
// so format drift fails; (b) the checked-in files open and read back every byte, label and key,
// and verify clean (deep). Shard files also have their first bytes checked against the spec.
//
// KILN_REGENERATE_GOLDEN=1 makes the Regenerate test write the files into the source tree
// instead (then review the diff, and update the format's spec if the bytes it quotes changed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/format_registry.h"
#include "formats/shards/shard_format.h"
#include "formats/shards/shard_reader.h"
#include "formats/verifier.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kGoldenDir = std::string(KILN_SOURCE_DIR) + "/tests/data/golden";

using testing::TestSample;
using GoldenSample = TestSample;

// One golden dataset: the writer's inputs and the files it must produce.
struct GoldenDataset {
  std::string name;  // directory name under the format's golden directory
  DatasetWriterOptions options;
  const char* compression;
  std::vector<GoldenSample> samples;
  Manifest manifest;                        // tool, classes, source (the writer adds the rest)
  std::vector<std::string> expected_files;  // besides kiln.json
  std::vector<std::string> ignored_files;   // written but not kept (LMDB's lock.mdb)
};

// Returns the directory holding `format`'s golden datasets.
std::string GoldenDirOf(const std::string& format) {
  return format == "shards" ? kGoldenDir : kGoldenDir + "-" + format;
}

TensorSchema Uint8Hwc(uint32_t h, uint32_t w, uint32_t c) { return testing::MakeSchema(h, w, c); }

// Keys: one of them non-ASCII, "café/猫.png" in UTF-8.
const std::string kCafeCatKey = "caf\xC3\xA9/\xE7\x8C\xAB.png";

// Shard golden files (tests/data/golden/README.md): raw, zstd, split.
GoldenDataset ShardGolden(std::string name, TensorSchema schema, const char* compression,
                          uint32_t record_alignment, uint64_t shard_size_bytes,
                          std::vector<GoldenSample> samples,
                          std::vector<std::string> expected_files) {
  GoldenDataset d;
  d.name = std::move(name);
  d.options.schema = schema;
  d.options.record_alignment = record_alignment;
  d.options.shard_size_bytes = shard_size_bytes;
  d.compression = compression;
  d.samples = std::move(samples);
  d.manifest.tool = "kiln golden (tests/formats/golden_test.cc)";
  d.manifest.classes = {"cat", "dog", "bird"};
  d.manifest.source_json =
      R"({"generator":"tests/formats/golden_test.cc","dataset":")" + d.name + "\"}";
  d.expected_files = std::move(expected_files);
  return d;
}

std::vector<GoldenDataset> ShardGoldenDatasets() {
  std::vector<GoldenDataset> out;
  // raw: 3 samples of 2x3x1 uint8, no compression, default alignment, one shard.
  out.push_back(ShardGolden("raw", Uint8Hwc(2, 3, 1), "none", 64, uint64_t{128} << 20,
                            {{{0x00, 0x01, 0x02, 0x03, 0x04, 0x05}, 0, "cat/0.png"},
                             {{0x10, 0x11, 0x12, 0x13, 0x14, 0x15}, 1, "dog/1.png"},
                             {{0xFF, 0xFE, 0xFD, 0xFC, 0xFB, 0xFA}, 2, kCafeCatKey}},
                            {"shard-00000.kiln"}));
  // zstd: 3 samples of 8x8x3 uint8 at zstd:3; samples 0 and 1 compress, sample 2 (bytes of a
  // fixed linear congruential generator) does not and is stored raw.
  std::vector<uint8_t> s0(192), s1(192), s2(192);
  uint32_t lcg = 12345;
  for (size_t i = 0; i < 192; ++i) {
    s0[i] = static_cast<uint8_t>(10 * (i / 24));           // grey rows 0, 10, ..., 70
    s1[i] = static_cast<uint8_t>((i % 3) == 0 ? 200 : 7);  // a red image
    lcg = lcg * 1103515245u + 12345u;
    s2[i] = static_cast<uint8_t>(lcg >> 16);
  }
  out.push_back(
      ShardGolden("zstd", Uint8Hwc(8, 8, 3), "zstd:3", 64, uint64_t{128} << 20,
                  {{s0, 2, "bird/rows.png"}, {s1, 0, "cat/red.png"}, {s2, 1, kCafeCatKey}},
                  {"shard-00000.kiln"}));
  // split: 5 samples of 2x3x1 uint8 with 256-byte alignment and 1 KiB shards: 3 + 2 records.
  std::vector<GoldenSample> split;
  for (int i = 0; i < 5; ++i) {
    std::vector<uint8_t> raw(6);
    for (int j = 0; j < 6; ++j) raw[j] = static_cast<uint8_t>(0x20 * i + j);
    split.push_back({raw, static_cast<int64_t>(i % 3),
                     i == 3 ? kCafeCatKey : "split/" + std::to_string(i) + ".png"});
  }
  out.push_back(ShardGolden("split", Uint8Hwc(2, 3, 1), "none", 256, 1024, std::move(split),
                            {"shard-00000.kiln", "shard-00001.kiln"}));
  return out;
}

// LMDB golden files (tests/data/golden-lmdb/README.md): 12 samples of 4x4x3, byte j of sample i
// (7 i + j / 3) & 0xff, label i % 5, key class_{i%3}/img-{i}.png, a 1 MiB initial map. The tool
// string is part of the golden bytes: it names the test file that first wrote them.
std::vector<GoldenDataset> LmdbGoldenDatasets() {
  std::vector<GoldenDataset> out;
  for (const char* compression : {"none", "zstd:3"}) {
    GoldenDataset d;
    d.name = std::string(compression) == "none" ? "raw" : "zstd";
    d.options.format = "lmdb";
    d.options.schema = Uint8Hwc(4, 4, 3);
    d.options.lmdb_initial_map_bytes = uint64_t{1} << 20;
    d.compression = compression;
    const testing::SampleMaker make = testing::PatternSamples(d.options.schema, 3);
    for (uint64_t i = 0; i < 12; ++i) d.samples.push_back(make(i));
    d.manifest.tool = "kiln test (tests/formats/lmdb_dataset_test.cc)";
    d.expected_files = {"data.mdb"};
    d.ignored_files = {"lock.mdb"};
    out.push_back(std::move(d));
  }
  return out;
}

// HDF5 golden files (tests/data/golden-hdf5/README.md): 12 samples of 8x8x3, byte j of sample i
// (7 i + j / 16) & 0xff, except in zstd/ samples 0, 5 and 10, which are noise (std::mt19937_64
// seeded i + 1, one draw a byte) and stored raw; label i % 5, key class_{i%3}/img-{i}.png.
std::vector<GoldenDataset> Hdf5GoldenDatasets() {
  std::vector<GoldenDataset> out;
  for (const char* compression : {"none", "zstd:3"}) {
    GoldenDataset d;
    const bool zstd = std::string(compression) != "none";
    d.name = zstd ? "zstd" : "raw";
    d.options.format = "hdf5";
    d.options.schema = Uint8Hwc(8, 8, 3);
    d.compression = compression;
    const testing::SampleMaker make = testing::PatternSamples(
        d.options.schema, 16, [zstd](uint64_t i) { return zstd && i % 5 == 0; });
    for (uint64_t i = 0; i < 12; ++i) d.samples.push_back(make(i));
    d.manifest.tool = "kiln test (tests/formats/hdf5_dataset_test.cc)";
    d.manifest.classes = {"a", "b", "c", "d", "e"};
    d.expected_files = {"data.h5"};
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<GoldenDataset> GoldenDatasetsOf(const std::string& format) {
  if (format == "shards") return ShardGoldenDatasets();
  if (format == "lmdb") return LmdbGoldenDatasets();
  if (format == "hdf5") return Hdf5GoldenDatasets();
  return {};
}

Status Generate(const GoldenDataset& d, const std::string& out_dir) {
  KILN_ASSIGN_OR_RETURN(Compression compression, Compression::Parse(d.compression));
  const std::vector<GoldenSample>& samples = d.samples;
  return testing::WriteTestDataset(
             out_dir, d.options, compression, samples.size(),
             [&samples](uint64_t i) { return samples[i]; }, d.manifest)
      .status();
}

// The names in `dir` that are not ignored, sorted.
std::vector<std::string> Names(const std::string& dir, const std::vector<std::string>& ignored) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (std::find(ignored.begin(), ignored.end(), name) == ignored.end()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool Regenerating() {
  const char* v = std::getenv("KILN_REGENERATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

// The registry's names, kept alive for the test parameters.
std::vector<std::string> FormatNames() {
  std::vector<std::string> names;
  for (const StorageFormat& f : StorageFormats()) names.push_back(f.name);
  return names;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    format_ = GetParam();
    if (!IsFormatSupported(format_)) GTEST_SKIP() << format_ << " is not built into this kiln";
    datasets_ = GoldenDatasetsOf(format_);
    ASSERT_FALSE(datasets_.empty()) << "format " << format_ << " has no golden files: add them";
  }
  std::string format_;
  std::vector<GoldenDataset> datasets_;
};

TEST_P(GoldenTest, Regenerate) {
  if (!Regenerating()) GTEST_SKIP() << "set KILN_REGENERATE_GOLDEN=1 to rewrite golden files";
  TempDir tmp;
  for (const GoldenDataset& d : datasets_) {
    const std::string fresh = tmp / d.name;
    Status s = Generate(d, fresh);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::string golden = GoldenDirOf(format_) + "/" + d.name;
    fs::remove_all(golden);
    fs::create_directories(golden);
    std::vector<std::string> files = d.expected_files;
    files.push_back(kManifestFileName);
    for (const std::string& f : files) fs::copy_file(fresh + "/" + f, golden + "/" + f);
  }
}

// (a) Format drift: the writer must reproduce every golden file byte for byte.
TEST_P(GoldenTest, WriterReproducesGoldenFilesByteForByte) {
  TempDir tmp;
  for (const GoldenDataset& d : datasets_) {
    SCOPED_TRACE(d.name);
    const std::string golden = GoldenDirOf(format_) + "/" + d.name;
    ASSERT_TRUE(fs::exists(golden + "/kiln.json"))
        << golden << " is missing: run the tests with KILN_REGENERATE_GOLDEN=1";
    const std::string fresh = tmp / d.name;
    Status s = Generate(d, fresh);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<std::string> expected = d.expected_files;
    expected.push_back(kManifestFileName);
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(Names(fresh, d.ignored_files), expected);
    EXPECT_EQ(Names(golden, {}), expected);
    for (const std::string& name : expected) {
      const std::vector<uint8_t> want = testing::ReadFileBytes(golden + "/" + name);
      const std::vector<uint8_t> got = testing::ReadFileBytes(fresh + "/" + name);
      EXPECT_EQ(got.size(), want.size()) << name;
      const auto diff = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
      EXPECT_TRUE(diff.first == got.end() && diff.second == want.end())
          << d.name << "/" << name << " differs from the golden file at byte "
          << (diff.first - got.begin())
          << " (format drift: if intended, bump the version and regenerate)";
    }
  }
}

// (b) The checked-in files read back exactly and verify clean.
TEST_P(GoldenTest, GoldenFilesReadBackEveryByteLabelAndKey) {
  for (const GoldenDataset& d : datasets_) {
    SCOPED_TRACE(d.name);
    const std::string golden = GoldenDirOf(format_) + "/" + d.name;
    auto ds = Dataset::Open(golden);
    ASSERT_TRUE(ds.ok()) << ds.status().ToString();
    const Manifest& m = (*ds)->manifest();
    EXPECT_EQ(m.format, format_);
    EXPECT_EQ(m.schema, d.options.schema);
    EXPECT_EQ(m.samples, d.samples.size());
    EXPECT_EQ(m.compression, d.compression);
    EXPECT_EQ(m.record_alignment, d.options.record_alignment);
    EXPECT_EQ(m.classes, d.manifest.classes);
    EXPECT_EQ(m.files.size(), d.expected_files.size());
    const std::vector<GoldenSample>& samples = d.samples;
    ASSERT_NO_FATAL_FAILURE(testing::ExpectDatasetHolds(golden, samples.size(),
                                                        [&](uint64_t i) { return samples[i]; }));
    const VerifyReport report = VerifyDataset(golden, VerifyOptions{true});
    EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GoldenTest, ::testing::ValuesIn(FormatNames()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(ShardGoldenTest, ZstdGoldenMixesCodecs) {
  auto reader = ShardReader::Open(kGoldenDir + "/zstd/shard-00000.kiln");
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->entry(0).codec, Codec::kZstd);
  EXPECT_EQ((*reader)->entry(1).codec, Codec::kZstd);
  EXPECT_EQ((*reader)->entry(2).codec, Codec::kNone);
}

// Datasets written before manifests had `files[].index_xxh3_64` (shard_format.md section 11)
// still open and read back: before-index-checksum/ is raw/ as kiln wrote it then (the shard's
// bytes did not change, its manifest did).
TEST(ShardGoldenTest, ManifestWithoutIndexChecksumsStillOpens) {
  const std::string dir = kGoldenDir + "/before-index-checksum";
  EXPECT_EQ(testing::ReadFileBytes(dir + "/shard-00000.kiln"),
            testing::ReadFileBytes(kGoldenDir + "/raw/shard-00000.kiln"));
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->manifest().files.size(), 1u);
  EXPECT_FALSE((*ds)->manifest().files[0].index_xxh3_64.has_value());
  const GoldenDataset raw = ShardGoldenDatasets().front();
  ASSERT_EQ(raw.name, "raw");
  ASSERT_NO_FATAL_FAILURE(testing::ExpectDatasetHolds(dir, raw.samples.size(),
                                                      [&](uint64_t i) { return raw.samples[i]; }));
  const VerifyReport report = VerifyDataset(dir, VerifyOptions{true});
  EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
  // The current manifest records the footer's index checksum (footer bytes 32..39).
  auto current = Dataset::Open(kGoldenDir + "/raw");
  ASSERT_TRUE(current.ok()) << current.status().ToString();
  const std::vector<uint8_t> b = testing::ReadFileBytes(kGoldenDir + "/raw/shard-00000.kiln");
  EXPECT_EQ((*current)->manifest().files[0].index_xxh3_64, LoadLE64(&b[b.size() - 64 + 32]));
}

// formats/shards/shard_format.md section 7 quotes these first 64 bytes of raw/shard-00000.kiln.
TEST(ShardGoldenTest, FirstBytesMatchTheSpec) {
  const std::vector<uint8_t> b = testing::ReadFileBytes(kGoldenDir + "/raw/shard-00000.kiln");
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
