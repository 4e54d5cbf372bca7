// Tests of the converter pipeline (tools/pack/packer.h) on real images and on built trigger inputs:
// pixel round trip against the Fashion-MNIST IDX files, determinism across thread counts,
// accounting of rejected inputs, crash-safety of failures, and the pack-level field cases.
#include "tools/pack/packer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <set>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/manifest.h"
#include "formats/verifier.h"
#include "reader/loader.h"
#include "tests/test_util.h"
#include "tools/pack/part_lock.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  // CTest runs each test in its own process, two at a time: scratch paths carry the process id.
  const std::string dir =
      ::testing::TempDir() + "kiln_packer_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::remove_all(dir + ".partial");
  return dir;
}

using ::kiln::testing::ReadFileString;

PackOptions FashionOptions(const std::string& out, uint32_t threads) {
  PackOptions o;
  o.input = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";
  o.output = out;
  o.threads = threads;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 28, 28, 1};
  return o;
}

// Reads the gzip'ed IDX file through gzip(1), as an outside reader would.
std::string Gunzip(const std::string& path) {
  std::string out;
  FILE* pipe = ::popen(("gzip -dc '" + path + "'").c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

TEST(PackerTest, FashionMnistPixelsEqualTheIdxFiles) {
  const std::string images_path = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  const std::string labels_path = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  if (!fs::exists(images_path)) GTEST_SKIP() << "package dataset-fashion-mnist is not installed";
  const std::string images = Gunzip(images_path), labels = Gunzip(labels_path);
  ASSERT_EQ(images.size(), 16u + 60000u * 784u);
  ASSERT_EQ(labels.size(), 8u + 60000u);

  const std::string out = FreshDir("fmnist");
  Result<PackReport> report = Pack(FashionOptions(out, 2));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->listed, 1000u);
  EXPECT_EQ(report->packed, 1000u);
  EXPECT_EQ(report->rejected, 0u);

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->num_samples(), 1000u);
  RecordDecoder decoder;
  std::vector<uint8_t> sample(784);
  for (uint64_t i = 0; i < 1000; ++i) {
    int64_t label = -1;
    ASSERT_TRUE((*ds)->ReadSample(i, &decoder, sample.data(), &label).ok());
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_TRUE(key.ok());
    // Keys look like "3_Dress/train-00012.png": the IDX index is in the name.
    const size_t dash = key->rfind('-');
    const uint64_t idx = std::stoull(key->substr(dash + 1, 5));
    ASSERT_LT(idx, 60000u);
    EXPECT_EQ(label, static_cast<uint8_t>(labels[8 + idx])) << *key;
    EXPECT_EQ(0, std::memcmp(sample.data(), images.data() + 16 + idx * 784, 784)) << *key;
  }
}

// B36 (writer side): the same inputs packed with 1 and 2 threads give byte-identical files.
TEST(PackerTest, FieldCase_B36_OutputIsByteIdenticalForAnyThreadCount) {
  std::map<std::string, std::string> first;
  for (uint32_t threads : {1u, 2u, 5u}) {
    const std::string out = FreshDir("threads" + std::to_string(threads));
    PackOptions o = FashionOptions(out, threads);
    o.compression = {Codec::kZstd, 3};
    o.shard_size_bytes = 200 << 10;  // several shards
    Result<PackReport> report = Pack(o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_GT(report->manifest.files.size(), 1u);
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(out)) {
      std::string contents = ReadFileString(entry.path().string());
      if (entry.path().filename() == "kiln.json" || entry.path().filename() == "rejected.tsv") {
        // These name the output directory; compare them with it replaced.
        for (size_t p; (p = contents.find(out)) != std::string::npos;)
          contents.replace(p, out.size(), "OUT");
      }
      files[entry.path().filename().string()] = contents;
    }
    if (first.empty()) {
      first = files;
    } else {
      EXPECT_EQ(files, first) << "threads " << threads;
    }
  }
}

TEST(PackerTest, PhotosPackToVerifiedRgbTensors) {
  const std::string out = FreshDir("photos");
  PackOptions o;
  o.input = std::string(KILN_SOURCE_DIR) + "/samples/photos";
  o.output = out;
  o.threads = 2;
  o.preprocess.schema = {DType::kUint8, Layout::kCHW, 64, 64, 3};
  o.compression = {Codec::kZstd, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->packed + report->rejected, report->listed);
  EXPECT_GT(report->packed, 10u);
  VerifyOptions deep;
  deep.deep = true;
  const VerifyReport verify = VerifyDataset(out, deep);
  EXPECT_TRUE(verify.ok()) << VerifyReportToText(verify);
  EXPECT_EQ(verify.records_checked, report->packed);
}

TEST(PackerTest, FloatOutputIsTheNormalisedUint8Output) {
  const std::string out_u8 = FreshDir("u8"), out_f32 = FreshDir("f32");
  PackOptions o = FashionOptions(out_u8, 2);
  ASSERT_TRUE(Pack(o).ok());
  o.output = out_f32;
  o.preprocess.schema.dtype = DType::kFloat32;
  o.preprocess.schema.layout = Layout::kCHW;
  o.preprocess.mean = {0.5f, 0.5f, 0.5f};
  o.preprocess.std = {0.25f, 0.25f, 0.25f};
  ASSERT_TRUE(Pack(o).ok());
  auto a = Dataset::Open(out_u8), b = Dataset::Open(out_f32);
  ASSERT_TRUE(a.ok() && b.ok());
  RecordDecoder decoder;
  std::vector<uint8_t> u8(784);
  std::vector<float> f32(784);
  for (uint64_t i : {0ull, 499ull, 999ull}) {
    int64_t la, lb;
    ASSERT_TRUE((*a)->ReadSample(i, &decoder, u8.data(), &la).ok());
    ASSERT_TRUE((*b)->ReadSample(i, &decoder, reinterpret_cast<uint8_t*>(f32.data()), &lb).ok());
    EXPECT_EQ(la, lb);
    for (size_t k = 0; k < 784; ++k) {
      EXPECT_NEAR(f32[k], (u8[k] / 255.0f - 0.5f) / 0.25f, 1e-5f);
    }
  }
}

TEST(PackerTest, WriteTimeShuffleIsRecordedAndAPermutation) {
  const std::string out = FreshDir("shuffled");
  PackOptions o = FashionOptions(out, 2);
  o.shuffle_seed = 11;
  ASSERT_TRUE(Pack(o).ok());
  Result<Manifest> m = Manifest::Read(out);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->shuffle_seed.has_value());
  EXPECT_EQ(*m->shuffle_seed, 11u);
  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok());
  std::set<std::string> keys;
  bool in_source_order = true;
  std::string previous;
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    const std::string key = *(*ds)->Key(i);
    in_source_order = in_source_order && previous < key;
    previous = key;
    keys.insert(key);
  }
  EXPECT_EQ(keys.size(), 1000u);
  EXPECT_FALSE(in_source_order);
}

// Writes a 6x6 JPEG of one colour; returns its path.
std::string WriteColourJpeg(const std::string& path, int value) {
  cv::Mat m(6, 6, CV_8UC3, cv::Scalar(value, value, value));
  cv::imwrite(path, m);
  return path;
}

struct B09Variant {
  const char* name;
  void (*make_c)(const std::string& path);
};

// B09: a bad c.jpg among a..e (labels 0..4): skip keeps a:0 b:1 d:3 e:4 aligned; fail leaves
// nothing under the output name.
TEST(PackerTest, FieldCase_B09_BadFileIsNamedAndLabelsStayAligned) {
  const B09Variant variants[] = {
      {"zero_bytes", [](const std::string& p) { std::ofstream(p, std::ios::binary); }},
      {"missing", [](const std::string&) {}},
      {"text", [](const std::string& p) { std::ofstream(p) << "not image"; }},
  };
  for (const B09Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const std::string src = FreshDir(std::string("b09_src_") + v.name);
    fs::create_directories(src);
    const int colour[5] = {10, 60, 110, 160, 210};
    const char* names[5] = {"a.jpg", "b.jpg", "c.jpg", "d.jpg", "e.jpg"};
    std::string list;
    for (int i = 0; i < 5; ++i) {
      if (i == 2) {
        v.make_c(src + "/c.jpg");
      } else {
        WriteColourJpeg(src + "/" + names[i], colour[i]);
      }
      list += std::string(names[i]) + " " + std::to_string(i) + "\n";
    }
    std::ofstream(src + "/list.txt") << list;

    PackOptions o;
    o.input = src + "/list.txt";
    o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
    o.threads = 2;
    o.output = FreshDir(std::string("b09_skip_") + v.name);
    Result<PackReport> report = Pack(o);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_EQ(report->listed, 5u);
    EXPECT_EQ(report->packed, 4u);
    ASSERT_EQ(report->rejections.size(), 1u);
    EXPECT_NE(report->rejections[0].path.find("c.jpg"), std::string::npos);
    EXPECT_FALSE(report->rejections[0].reason.empty());
    auto ds = Dataset::Open(o.output);
    ASSERT_TRUE(ds.ok());
    ASSERT_EQ((*ds)->num_samples(), 4u);
    RecordDecoder decoder;
    std::vector<uint8_t> px(4 * 4 * 3);
    for (uint64_t r = 0; r < 4; ++r) {
      int64_t label = -1;
      ASSERT_TRUE((*ds)->ReadSample(r, &decoder, px.data(), &label).ok());
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 5);
      EXPECT_NE(label, 2);
      EXPECT_NEAR(px[0], colour[label], 3) << "record " << r << " label " << label;
    }
    EXPECT_NE(ReadFileString(o.output + "/rejected.tsv").find("c.jpg"), std::string::npos);

    o.output = FreshDir(std::string("b09_fail_") + v.name);
    o.on_error = OnError::kFail;
    report = Pack(o);
    ASSERT_FALSE(report.ok());
    EXPECT_NE(report.status().message().find("c.jpg"), std::string::npos)
        << report.status().message();
    EXPECT_FALSE(fs::exists(o.output));
    EXPECT_FALSE(fs::exists(o.output + ".partial"));
  }
}

// B10: a directory with no images is an error naming the root and "0 images", leaving nothing.
TEST(PackerTest, FieldCase_B10_NoImagesIsAnErrorThatLeavesNothing) {
  const std::string src = FreshDir("b10_src");
  fs::create_directories(src + "/cls");
  for (const char* n : {"a.txt", "b.txt", "c.txt"}) std::ofstream(src + "/cls/" + n) << "x";
  PackOptions o;
  o.input = src;
  o.output = FreshDir("b10_out");
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("0 images"), std::string::npos);
  EXPECT_NE(report.status().message().find(src), std::string::npos);
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_FALSE(fs::exists(o.output + ".partial"));
}

// B10: mixed-case extensions are all packed: "5 read, 5 written".
TEST(PackerTest, FieldCase_B10_MixedCaseExtensionsAreAllPacked) {
  const std::string src = FreshDir("b10_mixed");
  fs::create_directories(src + "/cls");
  for (const char* n : {"a.jpg", "B.JPG", "c.Jpeg", "e.JPEG"})
    WriteColourJpeg(src + "/cls/" + n, 100);
  cv::imwrite(src + "/cls/d.PNG", cv::Mat(6, 6, CV_8UC3, cv::Scalar(1, 2, 3)));
  PackOptions o;
  o.input = src;
  o.output = FreshDir("b10_mixed_out");
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->listed, 5u);
  EXPECT_EQ(report->packed, 5u);
}

TEST(PackerTest, ExistingOutputIsRefusedUnlessOverwrite) {
  const std::string out = FreshDir("existing");
  PackOptions o = FashionOptions(out, 2);
  ASSERT_TRUE(Pack(o).ok());
  Result<PackReport> again = Pack(o);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::exists(out + "/kiln.json"));  // the old dataset is untouched
  o.overwrite = true;
  ASSERT_TRUE(Pack(o).ok());
  EXPECT_TRUE(VerifyDataset(out, {}).ok());
}

// Two packs into one output: the second is refused at once, naming the output and the writer,
// and touches nothing of the first's (its OUTPUT.partial stays). The first's lock is held here
// through PartLock as a running kiln pack holds it.
TEST(PackerTest, SecondWriterOfOneOutputIsRefusedAndDisturbsNothing) {
  const std::string out = FreshDir("two_writers");
  fs::create_directories(out + ".partial");
  std::ofstream(out + ".partial/kiln.staging") << "first writer's";
  Result<std::unique_ptr<PartLock>> first =
      PartLock::Acquire(out + ".partial.lock", "output " + out);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<PackReport> second = Pack(FashionOptions(out, 2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(second.status().message().find("being written by another process"), std::string::npos)
      << second.status().ToString();
  EXPECT_NE(second.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(ReadFileString(out + ".partial/kiln.staging"), "first writer's");
  EXPECT_FALSE(fs::exists(out));
  first->reset();  // the first writer ends: a new pack goes through and leaves no lock file
  fs::remove_all(out + ".partial");
  ASSERT_TRUE(Pack(FashionOptions(out, 2)).ok());
  EXPECT_FALSE(fs::exists(out + ".partial.lock"));
  EXPECT_TRUE(VerifyDataset(out, {}).ok());
}

TEST(PackerTest, OutputInsideOrHoldingTheInputIsRefused) {
  const std::string src = FreshDir("overlap_src");
  fs::create_directories(src + "/cls");
  WriteColourJpeg(src + "/cls/a.jpg", 50);
  PackOptions o;
  o.input = src;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  o.overwrite = true;
  for (const std::string& out : {src, src + "/out", src + "/cls/deeper"}) {
    o.output = out;
    Result<PackReport> report = Pack(o);
    ASSERT_FALSE(report.ok()) << out;
    EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find("overlap"), std::string::npos);
  }
  EXPECT_TRUE(fs::exists(src + "/cls/a.jpg"));
  EXPECT_FALSE(fs::exists(src + "/out"));
  // Relative forms, from inside the input: "." and "cls/.." are the input, "zz" lies in it.
  const fs::path cwd = fs::current_path();
  fs::current_path(src);
  for (const std::string& input : {std::string("."), std::string("cls/..")}) {
    o.input = input;
    o.output = "zz";
    Result<PackReport> report = Pack(o);
    EXPECT_FALSE(report.ok()) << input;
    EXPECT_NE(report.status().message().find("overlap"), std::string::npos) << input;
  }
  fs::current_path(cwd);
  EXPECT_FALSE(fs::exists(src + "/zz"));
}

// A flat folder of images (no class folders; the commonest first mistake) lists every image as
// a problem: the error gives the reasons, not "0 images found" with an extension hint.
TEST(PackerTest, EveryItemAProblemNamesTheReasons) {
  const std::string src = FreshDir("flat_src");
  fs::create_directories(src);
  for (int i = 0; i < 5; ++i) WriteColourJpeg(src + "/img" + std::to_string(i) + ".jpg", 40 + i);
  PackOptions o;
  o.input = src;
  o.output = FreshDir("flat_out");
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kCorruption);  // the data, not the usage
  const std::string& m = report.status().message();
  EXPECT_EQ(m.find("0 images found"), std::string::npos) << m;
  EXPECT_NE(m.find("all 5 listed items were rejected: "), std::string::npos) << m;
  EXPECT_NE(m.find("img0.jpg: image file directly under the root belongs to no class"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("; and 2 more"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(o.output));
}

TEST(PackerTest, AnImageFileAsInputIsAUsageError) {
  PackOptions o;
  o.input = std::string(KILN_SOURCE_DIR) + "/samples/photos/fruit/apple.jpg";
  o.output = FreshDir("image_input");
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("is an image file"), std::string::npos);
}

// A rejection keeps the decoder's bare reason beside the path (the decoder names the file in its
// status's location, not only in the message text), and --on-error fail names it the same way.
TEST(PackerTest, RejectionsHoldTheBareReasonAndTheFailureNamesTheFile) {
  const std::string src = FreshDir("bare_reason_src");
  fs::create_directories(src);
  WriteColourJpeg(src + "/a.jpg", 100);
  std::ofstream(src + "/b.jpg") << "not image";
  std::ofstream(src + "/list.txt") << "a.jpg 0\nb.jpg 1\n";
  PackOptions o;
  o.input = src + "/list.txt";
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  o.output = FreshDir("bare_reason_skip");
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rejections.size(), 1u);
  const Rejection r = report->rejections[0];  // a copy: `report` is reused below
  EXPECT_EQ(r.reason, "not an image");
  EXPECT_EQ(r.line, 2u);
  EXPECT_EQ(ReadFileString(o.output + "/rejected.tsv"),
            "# path\tline\treason (\\, tab, newline and CR escaped as \\\\ \\t \\n \\r)\n" +
                r.path + "\t2\tnot an image\n");

  o.output = FreshDir("bare_reason_fail");
  o.on_error = OnError::kFail;
  report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().message(), r.path + ": not an image (--on-error fail)");
  EXPECT_EQ(report.status().location().file, r.path);
  EXPECT_EQ(report.status().reason(), "not an image (--on-error fail)");
}

TEST(PackerTest, AllRejectedNamesTheReasonsAndLeavesNothing) {
  PackOptions o = FashionOptions(FreshDir("all_rejected"), 2);
  o.decode.max_pixels = 100;  // every 28x28 image is over the limit
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kCorruption);
  EXPECT_NE(report.status().message().find("all 1000 inputs were rejected"), std::string::npos);
  EXPECT_NE(report.status().message().find("exceeds the limit"), std::string::npos)
      << report.status().message();
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_FALSE(fs::exists(o.output + ".partial"));
}

// decode.max_pixels is a pack's one pixel limit: it bounds the resized image too. The 28 x 28
// images (784 pixels) pass the decode check at 1000 but resize to 56 x 56 = 3136 pixels.
TEST(PackerTest, MaxPixelsAlsoBoundsTheResizedImage) {
  PackOptions o = FashionOptions(FreshDir("max_pixels_resized"), 2);
  o.preprocess.schema.height = o.preprocess.schema.width = 56;
  o.decode.max_pixels = 1000;
  o.preprocess.max_pixels = 0;  // replaced by decode.max_pixels
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("gives 56 x 56 = 3136 pixels, which exceeds the "
                                           "limit of 1000"),
            std::string::npos)
      << report.status().message();
  o.decode.max_pixels = 3136;
  o.preprocess.max_pixels = 1;  // replaced as well: the pack's one limit allows 3136
  o.output = FreshDir("max_pixels_enough");
  report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->packed, 1000u);
}

TEST(PackerTest, ValidatePackOptionsRefusesWhatTheCliRefuses) {
  PackOptions o = FashionOptions(FreshDir("validate"), 1);
  EXPECT_TRUE(ValidatePackOptions(o).ok());
  PackOptions mean = o;
  mean.preprocess.mean = {0.5f, 0.5f, 0.5f};
  EXPECT_NE(ValidatePackOptions(mean).message().find("--mean and --std apply to float16"),
            std::string::npos);
  mean.preprocess.schema.dtype = DType::kFloat32;
  EXPECT_TRUE(ValidatePackOptions(mean).ok());
  mean.preprocess.std = {0.1f, 0.2f, 0.3f};
  EXPECT_NE(ValidatePackOptions(mean).message().find("--channels 1 takes one --mean and one --std"),
            std::string::npos);
  PackOptions channels = o;
  channels.preprocess.schema.channels = 2;
  EXPECT_EQ(ValidatePackOptions(channels).code(), StatusCode::kInvalidArgument);
  Result<PackReport> report = Pack(channels);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().message(), ValidatePackOptions(channels).message());
}

TEST(PackerTest, ResizeSmallerThanTheCropIsRefusedUpFront) {
  PackOptions o = FashionOptions(FreshDir("small_resize"), 2);
  o.preprocess.resize_shorter = 10;
  Result<PackReport> report = Pack(o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("--resize 10"), std::string::npos);
}

TEST(PackerTest, RejectedListEscapesTabsAndNewlines) {
  const std::string src = FreshDir("escape_src");
  fs::create_directories(src + "/cls");
  WriteColourJpeg(src + "/cls/good.jpg", 50);
  std::ofstream(src + "/cls/bad\nname\t.jpg") << "not an image";
  PackOptions o;
  o.input = src;
  o.output = FreshDir("escape_out");
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 4, 4, 3};
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rejected, 1u);
  const std::string tsv = ReadFileString(o.output + "/rejected.tsv");
  // One header line and one line for the bad file, with three tab-separated fields.
  EXPECT_EQ(std::count(tsv.begin(), tsv.end(), '\n'), 2);
  EXPECT_NE(tsv.find("bad\\nname\\t.jpg\t0\t"), std::string::npos) << tsv;
}

TEST(PackerTest, CancelStopsAndLeavesNothing) {
  PackOptions o = FashionOptions(FreshDir("cancelled"), 2);
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  Result<PackReport> report = Pack(o, [&](uint64_t done, uint64_t) {
    if (done == 100) cancel = true;  // as the Ctrl-C handler of `kiln pack` does
  });
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kCancelled);
  EXPECT_NE(report.status().message().find("interrupted"), std::string::npos);
  // 100 inputs in, one shard of 128 MiB not finished: nothing to resume, and the message says so.
  EXPECT_NE(report.status().message().find("no shard was finished: nothing is kept"),
            std::string::npos)
      << report.status().message();
  EXPECT_FALSE(fs::exists(o.output));
  EXPECT_FALSE(fs::exists(o.output + ".partial"));
}

// An interrupted pack continued with --resume gives the same bytes as one that ran
// through, with every input accounted for.
TEST(PackerTest, ResumeAfterInterruptionIsByteIdentical) {
  const std::string whole = FreshDir("resume_whole"), resumed = FreshDir("resume_resumed");
  PackOptions o = FashionOptions(whole, 2);
  o.shard_size_bytes = 64 << 10;  // about 80 samples per shard: many shards
  o.compression = {Codec::kZstd, 3};
  ASSERT_TRUE(Pack(o).ok());

  o.output = resumed;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  Result<PackReport> first = Pack(o, [&](uint64_t done, uint64_t) {
    if (done == 650) cancel = true;
  });
  ASSERT_EQ(first.status().code(), StatusCode::kCancelled);
  EXPECT_NE(first.status().message().find("--resume"), std::string::npos);
  // The message counts what --resume keeps (the inputs in finished shards), as the resumed run's
  // report does, not the 650 inputs done when it stopped.
  const std::string& msg = first.status().message();
  const size_t kept_at = msg.find("with the first ");
  ASSERT_NE(kept_at, std::string::npos) << msg;
  const uint64_t kept = std::stoull(msg.substr(kept_at + std::string("with the first ").size()));
  EXPECT_EQ(msg.rfind("interrupted after ", 0), 0u) << msg;
  EXPECT_NE(msg.find(" of 1000 inputs: " + resumed + " was not created; "), std::string::npos)
      << msg;
  EXPECT_FALSE(fs::exists(resumed));
  ASSERT_TRUE(fs::exists(resumed + ".partial"));

  o.cancel = nullptr;
  o.resume = true;
  Result<PackReport> second = Pack(o);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->resume_note.empty()) << second->resume_note;
  EXPECT_GT(second->resumed_inputs, 400u);
  EXPECT_EQ(second->resumed_inputs, kept);
  EXPECT_EQ(second->packed, 1000u);
  // The rate is this run's: the images it packed, not the ones taken over.
  EXPECT_EQ(second->resumed_packed, kept);  // no rejection in fashion-mnist
  EXPECT_GT(second->resumed_output_bytes, 0u);
  ASSERT_GT(second->seconds, 0.0);
  EXPECT_DOUBLE_EQ(PackImagesPerSecond(*second), (1000.0 - kept) / second->seconds);
  EXPECT_DOUBLE_EQ(PackMegabytesPerSecond(*second),
                   (second->output_bytes - second->resumed_output_bytes) / 1e6 / second->seconds);
  EXPECT_FALSE(fs::exists(resumed + ".partial"));
  for (const auto& entry : fs::directory_iterator(whole)) {
    const std::string name = entry.path().filename().string();
    std::string a = ReadFileString(entry.path().string()), b = ReadFileString(resumed + "/" + name);
    if (name == "kiln.json" || name == "rejected.tsv") {
      for (size_t p; (p = a.find(whole)) != std::string::npos;) a.replace(p, whole.size(), "OUT");
      for (size_t p; (p = b.find(resumed)) != std::string::npos;)
        b.replace(p, resumed.size(), "OUT");
    }
    EXPECT_EQ(a, b) << name;
  }
}

// The trial case: two packs of trees with the same names, one image replaced by another in the
// second, give shards of the same sizes and the same listing hash (names and labels only); a
// shard of the first copied over the second's was served without an error. The manifest's index
// checksum (shard_format.md section 11) refuses it at open, through Dataset and Loader, and
// verify names it.
TEST(PackerTest, ShardOfAnotherPackOfTheSameNamesIsRefused) {
  const std::string src_a = FreshDir("another_src_a"), src_b = FreshDir("another_src_b");
  const std::string samples = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";
  for (const std::string& src : {src_a, src_b}) {
    fs::copy(samples, src, fs::copy_options::recursive);
  }
  std::vector<std::string> pngs;
  for (const auto& entry : fs::directory_iterator(src_b + "/0_T-shirt_top")) {
    pngs.push_back(entry.path().string());
  }
  std::sort(pngs.begin(), pngs.end());
  ASSERT_GT(pngs.size(), 10u);
  fs::copy_file(pngs[9], pngs[3], fs::copy_options::overwrite_existing);
  PackOptions o = FashionOptions("", 2);
  o.shard_size_bytes = 64 << 10;  // uncompressed: every full shard has the same size
  const std::string a = FreshDir("another_a"), b = FreshDir("another_b");
  o.input = src_a;
  o.output = a;
  ASSERT_TRUE(Pack(o).ok());
  o.input = src_b;
  o.output = b;
  ASSERT_TRUE(Pack(o).ok());
  const std::string shard = b + "/shard-00000.kiln";
  ASSERT_EQ(fs::file_size(a + "/shard-00000.kiln"), fs::file_size(shard));
  ASSERT_TRUE(Dataset::Open(b).ok());
  fs::copy_file(a + "/shard-00000.kiln", shard, fs::copy_options::overwrite_existing);

  Result<std::unique_ptr<Dataset>> ds = Dataset::Open(b);
  ASSERT_FALSE(ds.ok()) << "the stale shard was accepted";
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  const std::string& msg = ds.status().message();
  EXPECT_NE(msg.find(shard), std::string::npos) << msg;
  EXPECT_NE(msg.find("shard-00000.kiln belongs to another pack"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a copy mixed two datasets?"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run kiln verify"), std::string::npos) << msg;

  LoaderOptions lo;
  lo.batch_size = 100;
  Result<std::unique_ptr<Loader>> loader = Loader::Open(b, lo);
  ASSERT_FALSE(loader.ok()) << "the loader served the stale shard";
  EXPECT_EQ(loader.status().code(), StatusCode::kCorruption);
  EXPECT_NE(loader.status().message().find("belongs to another pack"), std::string::npos)
      << loader.status().message();

  const VerifyReport report = VerifyDataset(b, VerifyOptions{});
  ASSERT_FALSE(report.ok());
  bool named = false;
  for (const VerifyProblem& p : report.problems) {
    named |= p.file == shard && p.reason.find("belongs to another pack") != std::string::npos;
  }
  EXPECT_TRUE(named) << VerifyReportToText(report);
  for (const std::string& dir : {src_a, src_b, a, b}) fs::remove_all(dir);
}

TEST(PackerTest, ResumeWithOtherOptionsStartsOver) {
  const std::string out = FreshDir("resume_other");
  PackOptions o = FashionOptions(out, 2);
  o.shard_size_bytes = 64 << 10;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  ASSERT_FALSE(Pack(o, [&](uint64_t done, uint64_t) {
                 if (done == 500) cancel = true;
               }).ok());
  o.cancel = nullptr;
  o.resume = true;
  o.shuffle_seed = 5;  // a different output: the kept shards must not be reused
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  // The note names the option that differs, with both values.
  EXPECT_NE(report->resume_note.find("used other options (--shuffle-seed was null, now 5)"),
            std::string::npos)
      << report->resume_note;
  EXPECT_EQ(report->resumed_inputs, 0u);
  EXPECT_TRUE(VerifyDataset(out, {}).ok());
}

TEST(PackerTest, ResumeAfterTheInputChangedSaysSo) {
  const std::string src = FreshDir("resume_grown_src");
  for (int i = 0; i < 40; ++i) {
    fs::create_directories(src + "/c" + std::to_string(i % 2));
    WriteColourJpeg(src + "/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".jpg", i);
  }
  const std::string out = FreshDir("resume_grown");
  PackOptions o;
  o.input = src;
  o.output = out;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 8, 8, 3};
  o.shard_size_bytes = 1024;
  o.threads = 1;
  std::atomic<bool> cancel{false};
  o.cancel = &cancel;
  ASSERT_FALSE(Pack(o, [&](uint64_t done, uint64_t) {
                 if (done == 30) cancel = true;
               }).ok());
  ASSERT_TRUE(fs::exists(out + ".partial/progress.json"));
  WriteColourJpeg(src + "/c0/extra.jpg", 99);
  o.cancel = nullptr;
  o.resume = true;
  Result<PackReport> report = Pack(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_NE(report->resume_note.find("listed 40 inputs, this run 41: the input changed"),
            std::string::npos)
      << report->resume_note;
  EXPECT_EQ(report->packed, 41u);
}

// Shrink-on-load (tools/imaging/shrink_on_load.h) is the default for JPEG; --exact-decode gives the
// bytes of the full decode: OpenCV's pixels (cv::imdecode, RGB), area-resized to the target and
// centre-cropped, computed here without kiln's decoder.
TEST(PackerTest, ExactDecodeGivesTheFullDecodeAndShrinkOnLoadIsTheDefault) {
  const std::string data = "/usr/share/doc/opencv-doc/examples/data/";
  const std::vector<std::string> names = {"aloeL.jpg",  "board.jpg",   "building.jpg",
                                          "fruits.jpg", "leuvenA.jpg", "baboon.jpg"};
  for (const std::string& n : names) {
    if (!fs::exists(data + n)) GTEST_SKIP() << "opencv-doc is not installed";
  }
  const std::string in = FreshDir("shrink_in");
  fs::create_directories(in + "/photos");
  for (const std::string& n : names) fs::copy_file(data + n, in + "/photos/" + n);
  PackOptions o;
  o.input = in;
  o.threads = 2;
  o.preprocess.schema = {DType::kUint8, Layout::kCHW, 64, 64, 3};
  PackOptions exact = o;
  exact.exact_decode = true;
  o.output = FreshDir("shrink_default");
  exact.output = FreshDir("shrink_exact");
  Result<PackReport> a = Pack(o), b = Pack(exact);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->manifest.preprocessing_json.find("\"jpeg_decode\":\"shrink-on-load\""),
            std::string::npos);
  EXPECT_NE(b->manifest.preprocessing_json.find("\"jpeg_decode\":\"exact\""), std::string::npos);
  auto da = Dataset::Open(o.output), db = Dataset::Open(exact.output);
  ASSERT_TRUE(da.ok() && db.ok());
  ASSERT_EQ((*db)->num_samples(), names.size());
  RecordDecoder decoder;
  const size_t bytes = 3 * 64 * 64;
  std::vector<uint8_t> shrunk(bytes), full(bytes);
  size_t differ = 0;
  for (uint64_t i = 0; i < names.size(); ++i) {
    const std::string key = *(*db)->Key(i);
    SCOPED_TRACE(key);
    int64_t label = -1;
    ASSERT_TRUE((*da)->ReadSample(i, &decoder, shrunk.data(), &label).ok());
    ASSERT_TRUE((*db)->ReadSample(i, &decoder, full.data(), &label).ok());
    cv::Mat rgb;
    cv::cvtColor(cv::imread(in + "/" + key, cv::IMREAD_COLOR), rgb, cv::COLOR_BGR2RGB);
    cv::Size target(64, 64);
    if (rgb.cols >= rgb.rows) {
      target.width = static_cast<int>(int64_t{rgb.cols} * 64 / rgb.rows);
    } else {
      target.height = static_cast<int>(int64_t{rgb.rows} * 64 / rgb.cols);
    }
    cv::Mat resized;
    cv::resize(rgb, resized, target, 0, 0, cv::INTER_AREA);
    const cv::Mat crop =
        resized(cv::Rect((target.width - 64) / 2, (target.height - 64) / 2, 64, 64));
    double sq = 0;
    for (int y = 0; y < 64; ++y) {
      for (int x = 0; x < 64; ++x) {
        for (int c = 0; c < 3; ++c) {
          const uint8_t want = crop.at<cv::Vec3b>(y, x)[c];
          ASSERT_EQ(full[(c * 64 + y) * 64 + x], want) << "x " << x << " y " << y << " c " << c;
          const double d = static_cast<double>(shrunk[(c * 64 + y) * 64 + x]) - want;
          sq += d * d;
        }
      }
    }
    if (sq > 0) ++differ;
    EXPECT_GE(10 * std::log10(255.0 * 255.0 * bytes / std::max(sq, 1.0)), 27.0);
  }
  // Each of these photos (512 x 512 to 1282 x 1110) is decoded at 1/4 to 64 x 64.
  EXPECT_EQ(differ, names.size());
}

}  // namespace
}  // namespace kiln
