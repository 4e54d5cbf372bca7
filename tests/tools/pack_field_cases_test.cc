// kiln pack on the field cases that concern what gets into a dataset: B38
// (GIFs in a folder are packed, every file is counted), B42 (one class map for every split),
// B43 (hidden entries skipped and counted), B44 (duplicate keys), B45 (large labels), and
// `kiln pack --json` on a failed pack. Images are real PNG / GIF files written by Pillow
// (tests/tools/pillow_reference.py) or OpenCV.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "formats/record_codec.h"
#include "tools/pack/packer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_pack_cases_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// An 8x8 PNG of one colour (B, G, R), written by OpenCV.
void WritePng(const std::string& path, cv::Scalar bgr) {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(cv::imwrite(path, cv::Mat(8, 8, CV_8UC3, bgr)));
}

PackOptions Options(const std::string& input, const std::string& output) {
  PackOptions o;
  o.input = input;
  o.output = output;
  o.threads = 2;
  o.preprocess.schema = {DType::kUint8, Layout::kHWC, 8, 8, 3};
  return o;
}

// Every sample of a dataset: key -> (label, first pixel R, G, B).
struct Sample {
  int64_t label;
  std::vector<uint8_t> rgb;
};
std::map<std::string, Sample> ReadBack(const std::string& dir) {
  std::map<std::string, Sample> out;
  Result<std::unique_ptr<Dataset>> d = Dataset::Open(dir);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return out;
  RecordDecoder decoder;
  std::vector<uint8_t> bytes((*d)->schema().sample_bytes());
  for (uint64_t i = 0; i < (*d)->num_samples(); ++i) {
    int64_t label = -1;
    EXPECT_TRUE((*d)->ReadSample(i, &decoder, bytes.data(), &label).ok());
    Result<std::string> key = (*d)->Key(i);
    EXPECT_TRUE(key.ok());
    out[*key] = {label, {bytes[0], bytes[1], bytes[2]}};
  }
  return out;
}

bool HavePillow() { return std::system("/usr/bin/python3 -c 'import PIL' 2>/dev/null") == 0; }

TEST(PackFieldCases, B38_GifsInAFolderArePackedAndEveryFileIsCounted) {
  if (!HavePillow()) GTEST_SKIP() << "python3-pil missing (scripts/setup.sh)";
  const std::string dir = FreshDir("b38");
  const std::string pillow = dir + "/pillow";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) +
                         "/tests/tools/pillow_reference.py make " + pillow)
                            .c_str()),
            0);
  const std::string tree = dir + "/tree";
  WritePng(tree + "/red/a.png", cv::Scalar(0, 0, 255));
  fs::copy_file(pillow + "/single.gif", tree + "/red/single.gif");
  fs::copy_file(pillow + "/anim.gif", tree + "/red/anim.gif");
  WriteFile(tree + "/red/notes.txt", "not an image\n");
  WriteFile(tree + "/red/.DS_Store", "");
  Result<PackReport> r = Pack(Options(tree, dir + "/folder.kiln"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packed, 3u);
  EXPECT_EQ(r->rejected, 0u);
  ASSERT_EQ(r->skipped, 2u);
  EXPECT_EQ(r->packed + r->rejected + r->skipped, 5u);  // the five files in red/
  EXPECT_EQ(r->skipped_files[0].path, tree + "/red/.DS_Store");
  EXPECT_EQ(r->skipped_files[1].path, tree + "/red/notes.txt");
  const std::string tsv = [&] {
    std::ifstream in(dir + "/folder.kiln/skipped.tsv");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NE(tsv.find(tree + "/red/notes.txt\tno image extension"), std::string::npos) << tsv;
  const nlohmann::json source = nlohmann::json::parse(r->manifest.source_json);
  EXPECT_EQ(source["skipped"], 2);
  EXPECT_EQ(source["skipped_list"], "skipped.tsv");
  for (const auto& [key, sample] : ReadBack(dir + "/folder.kiln")) {
    EXPECT_EQ(sample.rgb, (std::vector<uint8_t>{255, 0, 0})) << key;  // first frames are red
  }
  // The same files through a list file.
  WriteFile(tree + "/list.txt", "red/a.png 0\nred/single.gif 0\nred/anim.gif 0\n");
  Result<PackReport> listed = Pack(Options(tree + "/list.txt", dir + "/list.kiln"));
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->packed, 3u);
  EXPECT_EQ(listed->skipped, 0u);
}

TEST(PackFieldCases, B42_OneClassMapGivesCatTheSameIdInEverySplit) {
  const std::string dir = FreshDir("b42");
  for (const char* d : {"train/ant", "train/bee", "train/cat", "val/ant", "val/cat", "odd/dog"}) {
    WritePng(dir + "/" + d + "/x.png", cv::Scalar(1, 2, 3));
  }
  ASSERT_TRUE(Pack(Options(dir + "/train", dir + "/train.kiln")).ok());
  EXPECT_EQ(ReadBack(dir + "/train.kiln")["cat/x.png"].label, 2);
  // Without a map, val's cat is 1: the shift this case is about.
  ASSERT_TRUE(Pack(Options(dir + "/val", dir + "/val-unpinned.kiln")).ok());
  EXPECT_EQ(ReadBack(dir + "/val-unpinned.kiln")["cat/x.png"].label, 1);

  // --classes-from train.kiln (the CLI reads its manifest's classes) and --classes FILE.
  Result<Manifest> train = Manifest::Read(dir + "/train.kiln");
  ASSERT_TRUE(train.ok());
  WriteFile(dir + "/classes.txt", "ant\nbee\ncat\n");
  Result<std::vector<std::string>> from_file = ReadClassNames(dir + "/classes.txt");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(*from_file, train->classes);
  for (const auto& [name, map] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"dataset train.kiln", train->classes}, {"classes.txt", *from_file}}) {
    PackOptions o = Options(dir + "/val", dir + "/val-" + std::to_string(name.size()) + ".kiln");
    o.class_map = map;
    o.class_map_origin = name;
    Result<PackReport> r = Pack(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::map<std::string, Sample> val = ReadBack(o.output);
    EXPECT_EQ(val["ant/x.png"].label, 0) << name;
    EXPECT_EQ(val["cat/x.png"].label, 2) << name;
    EXPECT_EQ(r->manifest.classes, train->classes) << name;
    EXPECT_EQ(nlohmann::json::parse(r->manifest.source_json)["class_map"], name);
  }
  // A folder that is not in the map is refused by name; nothing is written.
  PackOptions odd = Options(dir + "/odd", dir + "/odd.kiln");
  odd.class_map = train->classes;
  odd.class_map_origin = "dataset train.kiln";
  Result<PackReport> refused = Pack(odd);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("class folder 'dog' under " + dir +
                                            "/odd is not in the class map dataset train.kiln"),
            std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(odd.output));
  // A class list naming a class twice is refused with both lines.
  WriteFile(dir + "/twice.txt", "ant\ncat\nant\n");
  Result<std::vector<std::string>> twice = ReadClassNames(dir + "/twice.txt");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("line 3: class 'ant' is already on line 1"),
            std::string::npos);
}

TEST(PackFieldCases, B43_HiddenEntriesAreSkippedAndCounted) {
  const std::string dir = FreshDir("b43");
  for (const char* c : {"a", "b", "c"})
    WritePng(dir + "/in/" + std::string(c) + "/x.png", {9, 9, 9});
  WritePng(dir + "/in/.ipynb_checkpoints/y.png", {9, 9, 9});
  WriteFile(dir + "/in/.DS_Store", "");
  WriteFile(dir + "/in/a/._x.png", "AppleDouble");
  WriteFile(dir + "/in/a/.DS_Store", "");
  fs::create_directory_symlink("..", dir + "/in/b/loop");
  Result<PackReport> r = Pack(Options(dir + "/in", dir + "/out.kiln"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->manifest.classes, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r->packed, 3u);
  EXPECT_EQ(r->skipped, 3u);   // the three hidden files; hidden folders are not walked
  ASSERT_EQ(r->rejected, 1u);  // the cycle, reported once
  EXPECT_EQ(r->rejections[0].path, dir + "/in/b/loop");
}

TEST(PackFieldCases, B44_SameFileListedTwiceWithTwoLabelsWarnsAndPacksBoth) {
  const std::string dir = FreshDir("b44");
  WritePng(dir + "/in/a.png", {0, 0, 255});
  WritePng(dir + "/in/x/same.png", {0, 255, 0});
  WritePng(dir + "/in/y/same.png", {255, 0, 0});
  WriteFile(dir + "/in/list.txt", "a.png 0\nx/same.png 1\na.png 1\ny/same.png 1\n");
  for (const std::string format : {"shards", "lmdb", "hdf5"}) {
    PackOptions o = Options(dir + "/in/list.txt", dir + "/" + format + ".kiln");
    o.format = format;
    Result<PackReport> r = Pack(o);
    ASSERT_TRUE(r.ok()) << format << ": " << r.status().ToString();
    EXPECT_EQ(r->packed, 4u) << format;
    ASSERT_EQ(r->warnings.size(), 1u) << format;
    EXPECT_EQ(r->warnings[0], dir +
                                  "/in/list.txt: line 3: 'a.png' is listed with label 1 and "
                                  "on line 1 with label 0; both are packed");
    Result<std::unique_ptr<Dataset>> d = Dataset::Open(o.output);
    ASSERT_TRUE(d.ok());
    ASSERT_EQ((*d)->num_samples(), 4u) << format;  // no entry lost to a key collision
    RecordDecoder decoder;
    std::vector<uint8_t> bytes((*d)->schema().sample_bytes());
    std::vector<int64_t> labels;
    for (uint64_t i = 0; i < 4; ++i) {
      int64_t label = -1;
      ASSERT_TRUE((*d)->ReadSample(i, &decoder, bytes.data(), &label).ok());
      labels.push_back(label);
    }
    EXPECT_EQ(labels, (std::vector<int64_t>{0, 1, 1, 1})) << format;
  }
}

TEST(PackFieldCases, B45_LargeLabelsComeBackExactlyInEveryFormat) {
  const std::string dir = FreshDir("b45");
  WritePng(dir + "/in/a.png", {5, 5, 5});
  const std::vector<int64_t> labels = {0, (int64_t{1} << 24) + 1, (int64_t{1} << 31) + 5,
                                       (int64_t{1} << 53) + 1, std::numeric_limits<int64_t>::max()};
  std::string list;
  for (int64_t l : labels) list += "a.png " + std::to_string(l) + "\n";
  WriteFile(dir + "/in/list.txt", list);
  for (const std::string format : {"shards", "lmdb", "hdf5"}) {
    PackOptions o = Options(dir + "/in/list.txt", dir + "/" + format + ".kiln");
    o.format = format;
    ASSERT_TRUE(Pack(o).ok()) << format;
    Result<std::unique_ptr<Dataset>> d = Dataset::Open(o.output);
    ASSERT_TRUE(d.ok());
    RecordDecoder decoder;
    std::vector<uint8_t> bytes((*d)->schema().sample_bytes());
    std::vector<int64_t> back;
    for (uint64_t i = 0; i < (*d)->num_samples(); ++i) {
      int64_t label = -1;
      ASSERT_TRUE((*d)->ReadSample(i, &decoder, bytes.data(), &label).ok());
      back.push_back(label);
    }
    EXPECT_EQ(back, labels) << format;
  }
}

struct CliRun {
  int exit_code;
  std::string out;
};

CliRun Kiln(const std::string& args) {
  const std::string cmd = std::string(KILN_BINARY_DIR) + "/tools/kiln " + args + " 2>/dev/null";
  CliRun r{-1, ""};
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(PackFieldCases, JsonCountsAlsoWhenEveryInputIsRejected) {
  const std::string dir = FreshDir("json");
  WriteFile(dir + "/in/x/a.jpg", "not a jpeg");
  WriteFile(dir + "/in/x/b.png", "not a png either");
  WriteFile(dir + "/in/x/readme.md", "skipped for its name");
  const CliRun r = Kiln("pack " + dir + "/in " + dir + "/out.kiln --size 8 --json");
  EXPECT_EQ(r.exit_code, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["listed"], 2);
  EXPECT_EQ(j["packed"], 0);
  EXPECT_EQ(j["rejected"], 2);
  EXPECT_EQ(j["skipped"], 1);
  ASSERT_EQ(j["rejections"].size(), 2u);
  EXPECT_EQ(j["rejections"][0]["path"], dir + "/in/x/a.jpg");
  EXPECT_EQ(j["skipped_files"][0]["path"], dir + "/in/x/readme.md");
  EXPECT_FALSE(fs::exists(dir + "/out.kiln"));

  // --on-error fail stops at the first bad input: the counts so far, nothing written.
  WritePng(dir + "/in/x/c.png", {1, 1, 1});
  const CliRun fail =
      Kiln("pack " + dir + "/in " + dir + "/out.kiln --size 8 --threads 1 --on-error fail --json");
  EXPECT_EQ(fail.exit_code, 1);
  const nlohmann::json f = nlohmann::json::parse(fail.out, nullptr, false);
  ASSERT_FALSE(f.is_discarded()) << fail.out;
  EXPECT_EQ(f["ok"], false);
  EXPECT_EQ(f["listed"], 3);
  EXPECT_EQ(f["packed"], 0);
  EXPECT_EQ(f["rejected"], 1);

  // A success says ok and the same counts.
  const CliRun ok = Kiln("pack " + dir + "/in " + dir + "/ok.kiln --size 8 --json");
  EXPECT_EQ(ok.exit_code, 0);
  const nlohmann::json s = nlohmann::json::parse(ok.out, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << ok.out;
  EXPECT_EQ(s["ok"], true);
  EXPECT_EQ(s["listed"], 3);
  EXPECT_EQ(s["packed"], 1);
  EXPECT_EQ(s["rejected"], 2);
  EXPECT_EQ(s["skipped"], 1);
}

// --classes and --classes-from on the command line, and the two together refused.
TEST(PackFieldCases, B42_ClassMapFlags) {
  const std::string dir = FreshDir("b42cli");
  for (const char* d : {"train/ant", "train/bee", "train/cat", "val/cat"}) {
    WritePng(dir + "/" + d + "/x.png", cv::Scalar(1, 2, 3));
  }
  ASSERT_EQ(Kiln("pack " + dir + "/train " + dir + "/train.kiln --size 8").exit_code, 0);
  ASSERT_EQ(Kiln("pack " + dir + "/val " + dir + "/val.kiln --size 8 --classes-from " + dir +
                 "/train.kiln")
                .exit_code,
            0);
  EXPECT_EQ(ReadBack(dir + "/val.kiln")["cat/x.png"].label, 2);
  WriteFile(dir + "/classes.txt", "cat\nant\nbee\n");
  ASSERT_EQ(
      Kiln("pack " + dir + "/val " + dir + "/val2.kiln --size 8 --classes " + dir + "/classes.txt")
          .exit_code,
      0);
  EXPECT_EQ(ReadBack(dir + "/val2.kiln")["cat/x.png"].label, 0);
  EXPECT_EQ(Kiln("pack " + dir + "/val " + dir + "/val3.kiln --size 8 --classes " + dir +
                 "/classes.txt --classes-from " + dir + "/train.kiln")
                .exit_code,
            2);
}

}  // namespace
}  // namespace kiln
