// The cross-format conformance suite: the same records written through DatasetWriter into every
// storage backend this build supports, with and without zstd, must read back identically (bytes,
// labels, keys), verify clean (also --deep), be found damaged when one byte of a record changes,
// and stream identically through the Loader's sampler order; a read-only directory holding only
// what the manifest lists opens, reads and stays unchanged, and 16 processes open a dataset at
// once (field case B26: ConformanceTest.FieldCase_B26_*). Every row of the format registry
// (formats/format_registry.h) is a parameter: a new backend joins by having a row.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/format_registry.h"
#include "formats/record_codec.h"
#include "formats/verifier.h"
#include "tests/formats/backend_checks.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kSamples = 300;

// The registry's names, kept alive for the test parameters (which hold const char*).
const std::vector<const char*>& FormatNames() {
  static const std::vector<const char*> names = [] {
    std::vector<const char*> v;
    for (const StorageFormat& f : StorageFormats()) v.push_back(f.name);
    return v;
  }();
  return names;
}
const TensorSchema kSchema{DType::kUint8, Layout::kHWC, 12, 10, 3};  // 360-byte samples

// Sample i: a pattern unique to i (its index in the first 8 bytes, then a ramp), so it can be
// found in any container file and no two samples are equal.
std::vector<uint8_t> SampleBytes(uint64_t i) {
  std::vector<uint8_t> bytes(kSchema.sample_bytes());
  for (size_t p = 0; p < bytes.size(); ++p) {
    bytes[p] = p < 8 ? static_cast<uint8_t>(i >> (8 * p)) : static_cast<uint8_t>(i * 31 + p * 7);
  }
  return bytes;
}
int64_t SampleLabel(uint64_t i) { return static_cast<int64_t>(i % 10); }
std::string SampleKey(uint64_t i) {
  return "class_" + std::to_string(i % 10) + "/ïmage " + std::to_string(i) + ".png";
}

class ConformanceTest : public ::testing::TestWithParam<std::tuple<const char*, bool>> {
 protected:
  void SetUp() override {
    format_ = std::get<0>(GetParam());
    compressed_ = std::get<1>(GetParam());
    if (!IsFormatSupported(format_)) GTEST_SKIP() << format_ << " is not built into this kiln";
    dir_ = ::testing::TempDir() + "kiln_conformance_" + std::to_string(::getpid()) + "_" + format_ +
           (compressed_ ? "_zstd" : "_raw");
    fs::remove_all(dir_);
    DatasetWriterOptions options;
    options.schema = kSchema;
    options.format = format_;
    options.shard_size_bytes = 40 << 10;  // several shards for the shard format
    Result<std::unique_ptr<DatasetWriter>> writer = DatasetWriter::Create(dir_, options);
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    RecordEncoder encoder(compressed_ ? Compression{Codec::kZstd, 3} : Compression{});
    for (uint64_t i = 0; i < kSamples; ++i) {
      EncodedRecord record;
      const std::vector<uint8_t> raw = SampleBytes(i);
      ASSERT_TRUE(
          encoder.Encode(raw.data(), raw.size(), SampleLabel(i), SampleKey(i), &record).ok());
      ASSERT_TRUE((*writer)->Add(record).ok());
    }
    Manifest manifest;
    manifest.compression = compressed_ ? "zstd:3" : "none";
    for (int c = 0; c < 10; ++c) manifest.classes.push_back("class_" + std::to_string(c));
    Result<Manifest> written = (*writer)->Finish(manifest);
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    EXPECT_EQ(written->format, format_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string format_;
  bool compressed_ = false;
  std::string dir_;
};

TEST_P(ConformanceTest, ReadsBackEveryByteLabelAndKey) {
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir_);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->num_samples(), kSamples);
  EXPECT_EQ((*ds)->schema(), kSchema);
  EXPECT_EQ((*ds)->manifest().format, format_);
  RecordDecoder decoder;
  std::vector<uint8_t> out(kSchema.sample_bytes());
  for (uint64_t i = 0; i < kSamples; ++i) {
    int64_t label = -1;
    ASSERT_TRUE((*ds)->ReadSample(i, &decoder, out.data(), &label).ok()) << i;
    ASSERT_EQ(out, SampleBytes(i)) << i;
    ASSERT_EQ(label, SampleLabel(i)) << i;
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_TRUE(key.ok());
    ASSERT_EQ(*key, SampleKey(i));
  }
  int64_t label;
  EXPECT_EQ((*ds)->ReadSample(kSamples, &decoder, out.data(), &label).code(),
            StatusCode::kOutOfRange);
}

TEST_P(ConformanceTest, VerifiesCleanAlsoDeep) {
  for (bool deep : {false, true}) {
    VerifyOptions options;
    options.deep = deep;
    const VerifyReport report = VerifyDataset(dir_, options);
    EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
    EXPECT_EQ(report.samples, kSamples);
    EXPECT_EQ(report.records_checked, kSamples);
  }
}

TEST_P(ConformanceTest, ADamagedRecordIsFoundByVerifyAndByTheReader) {
  if (compressed_) GTEST_SKIP() << "raw records only: the sample's bytes are located by search";
  // Find sample 17's bytes in whichever file holds them and flip one in the middle.
  const std::vector<uint8_t> needle = SampleBytes(17);
  std::string damaged_file;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const size_t at = bytes.find(std::string(needle.begin(), needle.end()));
    if (at == std::string::npos) continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + needle.size() / 2));
    f.put(static_cast<char>(bytes[at + needle.size() / 2] ^ 0x10));
    damaged_file = entry.path().string();
    break;
  }
  ASSERT_FALSE(damaged_file.empty()) << "sample 17 not found verbatim in " << dir_;

  const VerifyReport report = VerifyDataset(dir_, {});
  ASSERT_FALSE(report.ok());
  bool named = false;
  for (const VerifyProblem& p : report.problems) named = named || p.file == damaged_file;
  EXPECT_TRUE(named) << VerifyReportToText(report);

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir_);
  if (!ds.ok()) {  // a whole-file check at open is also acceptable
    EXPECT_NE(ds.status().message().find(fs::path(damaged_file).filename().string()),
              std::string::npos);
    return;
  }
  RecordDecoder decoder;
  std::vector<uint8_t> out(kSchema.sample_bytes());
  int64_t label;
  const Status s = (*ds)->ReadSample(17, &decoder, out.data(), &label);
  ASSERT_FALSE(s.ok()) << "the reader returned damaged bytes as good";
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(fs::path(damaged_file).filename().string()), std::string::npos)
      << s.message();
  // Every other sample still reads.
  EXPECT_TRUE((*ds)->ReadSample(16, &decoder, out.data(), &label).ok());
}

// Child body: opens the dataset in `dir` and reads every sample; 0 when all match, 2 when it does
// not open, 3 when a read fails, 4 when a sample's bytes or label differ.
int OpenAndReadAll(const std::string& dir) {
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir);
  if (!ds.ok()) {
    std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
    return 2;
  }
  RecordDecoder decoder;
  std::vector<uint8_t> out(kSchema.sample_bytes());
  for (uint64_t i = 0; i < kSamples; ++i) {
    int64_t label = -1;
    if (!(*ds)->ReadSample(i, &decoder, out.data(), &label).ok()) return 3;
    if (out != SampleBytes(i) || label != SampleLabel(i)) return 4;
  }
  return 0;
}

// A file's bytes and modification time, to show that nothing changed it.
struct FileState {
  std::string bytes;
  int64_t mtime_s = 0, mtime_ns = 0;
  bool operator==(const FileState& o) const {
    return bytes == o.bytes && mtime_s == o.mtime_s && mtime_ns == o.mtime_ns;
  }
};

std::map<std::string, FileState> DirectoryState(const std::string& dir) {
  std::map<std::string, FileState> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    struct stat st {};
    EXPECT_EQ(::stat(e.path().c_str(), &st), 0) << e.path();
    files[e.path().filename().string()] = {testing::ReadFileString(e.path().string()),
                                           st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
  }
  return files;
}

// B26: a dataset directory holding only kiln.json and the data files its manifest lists (no
// lock.mdb, no rejected.tsv), made read-only with its files, opens, reads and verifies, also from
// 4 processes at once, and nothing in it is created or changed (as root chmod does not stop
// writes, so the test compares every file's bytes and modification time).
TEST_P(ConformanceTest, FieldCase_B26_ReadOnlyDirectoryOpensAndStaysUnchanged) {
  Result<Manifest> manifest = Manifest::Read(dir_);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  std::set<std::string> listed = {"kiln.json"};
  for (const DataFileInfo& f : manifest->files) listed.insert(f.file);
  for (const auto& e : fs::directory_iterator(dir_)) {
    if (listed.count(e.path().filename().string()) == 0) fs::remove_all(e.path());
  }
  const std::map<std::string, FileState> before = DirectoryState(dir_);
  ASSERT_EQ(before.size(), listed.size());
  const auto r = fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read;
  const auto x = fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec;
  for (const std::string& name : listed) fs::permissions(dir_ + "/" + name, r);
  fs::permissions(dir_, r | x);
  EXPECT_EQ(OpenAndReadAll(dir_), 0);
  const VerifyReport report = VerifyDataset(dir_, {});
  EXPECT_TRUE(report.ok()) << VerifyReportToText(report);
  EXPECT_EQ(testing::RunAtOnce(4, [&] { return OpenAndReadAll(dir_); }), std::vector<int>(4, 0));
  fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);  // for TearDown
  const std::map<std::string, FileState> after = DirectoryState(dir_);
  EXPECT_EQ(after.size(), before.size());
  for (const auto& [name, state] : before) {
    EXPECT_TRUE(after.count(name) && after.at(name) == state) << name << " changed";
  }
}

// B26: 16 processes open the same dataset at the same instant (a pipe barrier), 10 times for
// each of the raw and zstd datasets.
TEST_P(ConformanceTest, FieldCase_B26_SixteenProcessesOpenAtOnce) {
  for (int rep = 0; rep < 10; ++rep) {
    EXPECT_EQ(testing::RunAtOnce(16, [&] { return OpenAndReadAll(dir_); }), std::vector<int>(16, 0))
        << "repetition " << rep;
  }
}

// Returns how many times `part` occurs in `text`.
size_t Occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Whatever is damaged (the manifest unreadable, a field or its checksum, the data files cut,
// replaced by garbage or missing), every problem names its file in the `file` field and its
// reason never names it again: one file name per line of `kiln verify`, once in --json.
TEST_P(ConformanceTest, EveryVerifyProblemNamesItsFileOnce) {
  const std::string manifest_path = dir_ + "/kiln.json";
  const std::string manifest = [&] {
    std::ifstream in(manifest_path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }();
  std::vector<std::string> data_files;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name != "kiln.json" && name != "lock.mdb") data_files.push_back(entry.path().string());
  }
  ASSERT_FALSE(data_files.empty());
  const std::string data = data_files.front();
  const std::string data_bytes = [&] {
    std::ifstream in(data, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }();
  auto write = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  std::string edited = manifest;
  const size_t samples_at = edited.find("\"samples\": 300");
  ASSERT_NE(samples_at, std::string::npos) << manifest;
  edited.replace(samples_at, 14, "\"samples\": 301");
  std::string bad_dtype = manifest;
  bad_dtype.replace(bad_dtype.find("\"uint8\""), 7, "\"uint9\"");
  const std::vector<std::pair<std::string, std::function<void()>>> damages = {
      {"manifest not JSON", [&] { write(manifest_path, manifest.substr(0, 50)); }},
      {"manifest field", [&] { write(manifest_path, bad_dtype); }},
      {"manifest checksum", [&] { write(manifest_path, edited); }},
      {"data garbage", [&] { write(data, std::string(data_bytes.size(), '\x5a')); }},
      {"data cut", [&] { write(data, data_bytes.substr(0, 3000)); }},
      {"data empty", [&] { write(data, ""); }},
      {"data missing", [&] { fs::remove(data); }},
  };
  for (const auto& [what, damage] : damages) {
    damage();
    const VerifyReport report = VerifyDataset(dir_, {});
    EXPECT_FALSE(report.ok()) << what;
    const std::string text = VerifyReportToText(report);
    const std::string json = VerifyReportToJson(report);
    for (const VerifyProblem& p : report.problems) {
      EXPECT_FALSE(p.file.empty()) << what;
      EXPECT_EQ(p.reason.find(p.file), std::string::npos)
          << what << ": the reason names " << p.file << " again: " << p.reason;
    }
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      for (const std::string& file : std::vector<std::string>{manifest_path, data}) {
        EXPECT_LE(Occurrences(line, file), 1u) << what << ": " << line;
      }
    }
    if (what.rfind("manifest", 0) == 0) {
      // The manifest's problem, with the reason from Manifest::FromJson once.
      ASSERT_FALSE(report.problems.empty()) << what;
      EXPECT_EQ(report.problems[0].file, manifest_path) << text;
      EXPECT_EQ(Occurrences(json, manifest_path), 1u) << what << ": " << json;
    }
    write(manifest_path, manifest);
    write(data, data_bytes);
  }
  EXPECT_TRUE(VerifyDataset(dir_, {}).ok()) << "the damages were not all undone";
}

std::string Name(const ::testing::TestParamInfo<std::tuple<const char*, bool>>& info) {
  return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_zstd" : "_raw");
}

INSTANTIATE_TEST_SUITE_P(AllFormats, ConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(FormatNames()), ::testing::Bool()),
                         Name);

}  // namespace
}  // namespace kiln
