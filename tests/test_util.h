// Helpers shared by the tests of every folder, so that no test file carries its own copy:
//  - kiln::TempDir: a fresh scratch directory per test, removed (with any permissions a test took
//    away restored first) when the test ends. Named after the test and the process id, because
//    CTest runs each test in its own process, two at a time.
//  - kiln::testing::ReadFileBytes / WriteFileBytes: a whole file as bytes, for damaging it.
//  - kiln::testing::ReadFileString / ReadTestInput / WriteFileString: a whole file as a string
//    (an output to compare, an encoded image to decode, an input to write).
//  - kiln::testing::MakeSchema: a TensorSchema from its shape.
//  - kiln::testing::WriteTestDataset / ExpectDatasetHolds: write samples made by a function into
//    any storage backend through DatasetWriter, and read every one of them back.
//  - kiln::testing::PatternBytes / NoiseBytes / ClassKey / PatternSamples: the samples that the
//    backends' tests and their golden files are made of.
// Thread safety: none needed; call them on the test's thread.
#ifndef KILN_TESTS_TEST_UTIL_H_
#define KILN_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/dataset_writer.h"
#include "formats/manifest.h"
#include "formats/record_codec.h"
#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

class TempDir {
 public:
  TempDir() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = (std::filesystem::temp_directory_path() /
             ("kiln_" + std::to_string(::getpid()) + "_" + name))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(path_, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Returns the path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

namespace testing {

// Returns every byte of `path`; empty when it cannot be read.
inline std::vector<uint8_t> ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

// Returns every byte of `path` as a string; empty when it cannot be read.
inline std::string ReadFileString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// ReadFileString of an input the test needs: also fails the test, naming `path`, when it cannot
// be opened.
inline std::string ReadTestInput(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing test input " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Replaces the contents of `path` with `bytes`.
inline void WriteFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Replaces the contents of `path` with `bytes` (any bytes, NULs included).
inline void WriteFileString(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The schema of `height` x `width` x `channels` samples; uint8 HWC unless told.
inline TensorSchema MakeSchema(uint32_t height, uint32_t width, uint32_t channels,
                               Layout layout = Layout::kHWC, DType dtype = DType::kUint8) {
  TensorSchema schema;
  schema.dtype = dtype;
  schema.layout = layout;
  schema.height = height;
  schema.width = width;
  schema.channels = channels;
  return schema;
}

// One sample as a test makes it: raw tensor bytes (schema.sample_bytes() of them), label, key.
struct TestSample {
  std::vector<uint8_t> raw;
  int64_t label = 0;
  std::string key;
};
using SampleMaker = std::function<TestSample(uint64_t index)>;

// Sample `i`'s bytes in the backends' tests: byte j is (7 i + j / `run`) & 0xff, a pattern that
// zstd compresses.
inline std::vector<uint8_t> PatternBytes(const TensorSchema& schema, uint64_t i, uint32_t run) {
  std::vector<uint8_t> raw(schema.sample_bytes());
  for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>((i * 7 + j / run) & 0xff);
  return raw;
}

// Sample `i`'s bytes as noise that zstd cannot shrink: one std::mt19937_64 draw a byte, seeded
// i + 1.
inline std::vector<uint8_t> NoiseBytes(const TensorSchema& schema, uint64_t i) {
  std::vector<uint8_t> raw(schema.sample_bytes());
  std::mt19937_64 rng(i + 1);
  for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(rng());
  return raw;
}

// Sample `i`'s key in the backends' tests: "class_{i % 3}/img-{i}.png".
inline std::string ClassKey(uint64_t i) {
  return "class_" + std::to_string(i % 3) + "/img-" + std::to_string(i) + ".png";
}

// Sample i: PatternBytes(schema, i, run), or NoiseBytes where `noise(i)` is true; label i % 5;
// key ClassKey(i).
inline SampleMaker PatternSamples(const TensorSchema& schema, uint32_t run,
                                  std::function<bool(uint64_t)> noise = nullptr) {
  return [schema, run, noise](uint64_t i) {
    return TestSample{noise && noise(i) ? NoiseBytes(schema, i) : PatternBytes(schema, i, run),
                      static_cast<int64_t>(i % 5), ClassKey(i)};
  };
}

// Writes samples 0..`samples`-1, each made by `make`, into `dir` through DatasetWriter with
// `options` (format, schema, shard size...), encoded with `compression`. `manifest` supplies the
// manifest fields the writer does not fill (classes, tool, source); its compression is set to
// compression.ToString(). Returns the manifest written, or the first error.
inline Result<Manifest> WriteTestDataset(const std::string& dir,
                                         const DatasetWriterOptions& options,
                                         const Compression& compression, uint64_t samples,
                                         const SampleMaker& make, Manifest manifest = {}) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(dir, options));
  RecordEncoder encoder(compression);
  EncodedRecord record;
  for (uint64_t i = 0; i < samples; ++i) {
    const TestSample s = make(i);
    KILN_RETURN_IF_ERROR(encoder.Encode(s.raw.data(), s.raw.size(), s.label, s.key, &record));
    KILN_RETURN_IF_ERROR(writer->Add(record));
  }
  manifest.compression = compression.ToString();
  return writer->Finish(manifest);
}

// Expects the dataset in `dir` to hold exactly `samples` samples, sample i being make(i): bytes,
// label and key; and an out-of-range read to be OutOfRange. Use with ASSERT_NO_FATAL_FAILURE.
inline void ExpectDatasetHolds(const std::string& dir, uint64_t samples, const SampleMaker& make) {
  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->num_samples(), samples);
  RecordDecoder decoder;
  std::vector<uint8_t> out((*ds)->schema().sample_bytes());
  for (uint64_t i = 0; i < samples; ++i) {
    const TestSample want = make(i);
    int64_t label = -1;
    Status s = (*ds)->ReadSample(i, &decoder, out.data(), &label);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(out, want.raw) << "sample " << i;
    ASSERT_EQ(label, want.label) << "sample " << i;
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_TRUE(key.ok()) << key.status().ToString();
    ASSERT_EQ(*key, want.key) << "sample " << i;
  }
  int64_t label = 0;
  EXPECT_EQ((*ds)->ReadSample(samples, &decoder, out.data(), &label).code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->Key(samples).status().code(), StatusCode::kOutOfRange);
}

}  // namespace testing
}  // namespace kiln

#endif  // KILN_TESTS_TEST_UTIL_H_
