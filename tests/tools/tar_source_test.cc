// WebDataset tar shards as converter input (tools/tar_source.h): shards written by GNU tar and
// by Python's tarfile from the shipped sample photos, flat and with directories in the keys,
// names with dots and Unicode, a non-image member, samples with no image or two, a truncated
// last member; the packed tensors equal those of the same images packed as an ImageFolder.
#include "tools/tar_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "tools/packer.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";

std::string Scratch(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_tar_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs a Python program with /usr/bin/python3 (Debian's, in scripts/setup.sh).
int RunPython(const std::string& dir, const std::string& program) {
  const std::string script = dir + "/make.py";
  WriteAll(script, program);
  return std::system(("/usr/bin/python3 '" + script + "'").c_str());
}

struct Packed {
  std::map<std::string, std::vector<uint8_t>> tensors;  // by key
  std::map<std::string, int64_t> labels;
  PackReport report;
};

PackOptions Options(const std::string& input, const std::string& output) {
  PackOptions o;
  o.input = input;
  o.output = output;
  o.threads = 2;
  o.preprocess.schema = {DType::kUint8, Layout::kCHW, 48, 48, 3};
  return o;
}

Packed PackAndRead(const PackOptions& o) {
  Packed p;
  Result<PackReport> report = Pack(o);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return p;
  p.report = *report;
  auto ds = Dataset::Open(o.output);
  EXPECT_TRUE(ds.ok());
  if (!ds.ok()) return p;
  RecordDecoder decoder;
  for (uint64_t i = 0; i < (*ds)->num_samples(); ++i) {
    std::vector<uint8_t> t(o.preprocess.schema.sample_bytes());
    int64_t label = -1;
    EXPECT_TRUE((*ds)->ReadSample(i, &decoder, t.data(), &label).ok());
    const std::string key = *(*ds)->Key(i);
    p.tensors[key] = t;
    p.labels[key] = label;
  }
  return p;
}

std::string ShardBytes(const std::string& dataset) {
  std::string all;
  for (const auto& e : fs::directory_iterator(dataset)) {
    if (e.path().extension() == ".kshard") all += ReadAll(e.path().string());
  }
  return all;
}

TEST(TarSourceTest, BraceAndGlobPatternsExpandInOrder) {
  const std::string dir = Scratch("patterns");
  fs::create_directories(dir);
  for (const char* n : {"000000.tar", "000001.tar", "000002.tar", "000010.tar"}) {
    WriteAll(dir + "/" + n, "");
  }
  Result<std::vector<std::string>> r = ExpandShardInput(dir + "/{000000..000002}.tar");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<std::string>{dir + "/000000.tar", dir + "/000001.tar",
                                          dir + "/000002.tar"}));
  r = ExpandShardInput(dir + "/0000{0,1}*.tar");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(r->back(), dir + "/000010.tar");
  r = ExpandShardInput(dir);  // a directory of shards
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_TRUE(IsTarInput(dir));
  EXPECT_TRUE(IsTarInput(dir + "/{000000..000002}.tar"));
  EXPECT_FALSE(IsTarInput(kPhotos));  // an ImageFolder tree
  r = ExpandShardInput(dir + "/{000000..000003}.tar");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("000003.tar"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(ExpandShardInput(dir + "/{000000..000003.tar").ok());
}

// GNU tar over samples/photos: keys "animal/baboon" etc., classes from the key's folder; the
// tensors and labels equal kiln pack of samples/photos as an ImageFolder, for 1 and 2 threads.
TEST(TarSourceTest, GnuTarShardEqualsTheImageFolder) {
  const std::string dir = Scratch("gnu");
  fs::create_directories(dir);
  const std::string shard = dir + "/photos-000000.tar";
  ASSERT_EQ(
      std::system(
          ("tar -C '" + kPhotos + "' -cf '" + shard + "' animal fruit letter_f scene").c_str()),
      0);
  PackOptions tar = Options(shard, dir + "/tar.kiln");
  tar.tar.label_from = "class-folder";
  const Packed from_tar = PackAndRead(tar);
  PackOptions folder = Options(kPhotos, dir + "/folder.kiln");
  const Packed from_folder = PackAndRead(folder);
  ASSERT_EQ(from_folder.tensors.size(), 23u);
  ASSERT_EQ(from_tar.tensors.size(), 23u);
  EXPECT_EQ(from_tar.report.skipped, 4u);  // the four directory entries
  EXPECT_EQ(from_tar.report.rejected, 0u);
  EXPECT_EQ(from_tar.report.manifest.classes, from_folder.report.manifest.classes);
  for (const auto& [key, tensor] : from_folder.tensors) {
    const std::string tar_key = key.substr(0, key.rfind('.'));
    ASSERT_EQ(from_tar.tensors.count(tar_key), 1u) << tar_key;
    EXPECT_EQ(from_tar.tensors.at(tar_key), tensor) << key;
    EXPECT_EQ(from_tar.labels.at(tar_key), from_folder.labels.at(key)) << key;
  }
  PackOptions one_thread = tar;
  one_thread.threads = 1;
  one_thread.output = dir + "/tar1.kiln";
  ASSERT_TRUE(Pack(one_thread).ok());
  EXPECT_EQ(ShardBytes(one_thread.output), ShardBytes(tar.output));
}

// Python's tarfile (PAX, UTF-8 names) writes a flat shard with KEY.cls labels and one with
// directories in the keys, Unicode and dots in the names, a non-image member, and samples
// with no image or two; across two shards named by a brace pattern.
TEST(TarSourceTest, PythonTarfileShardsAccountForEveryMember) {
  const std::string dir = Scratch("python");
  fs::create_directories(dir);
  ASSERT_EQ(RunPython(dir, R"PY(
import io, os, tarfile
photos = ")PY" + kPhotos + R"PY("
dir = ")PY" + dir + R"PY("
def add(t, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))
def photo(p):
    return open(os.path.join(photos, p), "rb").read()
with tarfile.open(os.path.join(dir, "shard-000000.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "s000.jpg", photo("animal/baboon.jpg")); add(t, "s000.cls", b"3\n")
    add(t, "s001.jpg", photo("fruit/apple.jpg")); add(t, "s001.cls", b"1")
    add(t, "s001.txt", b"a caption")  # not an image or label member: skipped
with tarfile.open(os.path.join(dir, "shard-000001.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    add(t, "caf\u00e9/b\u00e4by.jpg", photo("animal/butterfly.jpg")); add(t, "caf\u00e9/b\u00e4by.cls", b"2")
    add(t, "v1.2/img.jpg", photo("scene/home.jpg")); add(t, "v1.2/img.cls", b"0")
    add(t, "v1.2/img.seg.png", b"not used")  # extension seg.png: not an image member
    add(t, "lonely.cls", b"5")  # no image
    add(t, "twice.jpg", photo("fruit/orange.jpg")); add(t, "twice.png", b"x"); add(t, "twice.cls", b"1")
    add(t, "badlabel.jpg", photo("fruit/orange.jpg")); add(t, "badlabel.cls", b"cat")
)PY"),
            0);
  const Packed p = PackAndRead(Options(dir + "/shard-{000000..000001}.tar", dir + "/out.kiln"));
  const PackReport& r = p.report;
  EXPECT_EQ(r.packed, 4u);
  EXPECT_EQ(r.rejected, 3u);
  EXPECT_EQ(r.listed, 7u);
  EXPECT_EQ(r.skipped, 2u);  // s001.txt and v1.2/img.seg.png
  ASSERT_EQ(p.tensors.size(), 4u);
  EXPECT_EQ(p.labels.at("s000"), 3);
  EXPECT_EQ(p.labels.at("s001"), 1);
  EXPECT_EQ(p.labels.at("caf\u00e9/b\u00e4by"), 2);
  EXPECT_EQ(p.labels.at("v1.2/img"), 0);
  std::string reasons;
  for (const Rejection& x : r.rejections) reasons += x.path + ": " + x.reason + "\n";
  EXPECT_NE(reasons.find("sample lonely has no image member"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("sample twice has 2 image members (twice.jpg, twice.png, twice.cls)"),
            std::string::npos)
      << reasons;
  EXPECT_NE(reasons.find("badlabel.cls at byte offset"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("not an integer label"), std::string::npos) << reasons;

  // The same images as an ImageFolder give the same tensors.
  const std::string folder = dir + "/folder";
  fs::create_directories(folder + "/c");
  const std::map<std::string, std::string> source = {
      {"s000", "animal/baboon.jpg"},
      {"s001", "fruit/apple.jpg"},
      {"caf\u00e9/b\u00e4by", "animal/butterfly.jpg"},
      {"v1.2/img", "scene/home.jpg"}};
  for (const auto& [key, file] : source) {
    fs::copy_file(kPhotos + "/" + file, folder + "/c/" + fs::path(file).filename().string());
  }
  const Packed f = PackAndRead(Options(folder, dir + "/folder.kiln"));
  for (const auto& [key, file] : source) {
    const std::string folder_key = "c/" + fs::path(file).filename().string();
    ASSERT_EQ(f.tensors.count(folder_key), 1u);
    EXPECT_EQ(p.tensors.at(key), f.tensors.at(folder_key)) << key;
  }
}

// json:FIELD labels, and a shard cut inside its last member: the samples before it are packed,
// the cut one is a rejection naming the member and its byte offset.
TEST(TarSourceTest, JsonLabelsAndATruncatedLastMember) {
  const std::string dir = Scratch("truncated");
  fs::create_directories(dir);
  ASSERT_EQ(RunPython(dir, R"PY(
import io, json, os, tarfile
photos = ")PY" + kPhotos + R"PY("
path = os.path.join(")PY" + dir +
                               R"PY(", "cut.tar")
names = ["animal/baboon.jpg", "fruit/apple.jpg", "scene/building.jpg"]
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
    for i, n in enumerate(names):
        for name, data in ((f"k{i}.json", json.dumps({"label": 10 + i}).encode()),
                           (f"k{i}.jpg", open(os.path.join(photos, n), "rb").read())):
            info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
with tarfile.open(path) as t:
    last = t.getmembers()[-1]
    cut = last.offset_data + last.size // 2
os.truncate(path, cut)
)PY"),
            0);
  PackOptions o = Options(dir + "/cut.tar", dir + "/out.kiln");
  o.tar.label_from = "json:label";
  const Packed p = PackAndRead(o);
  EXPECT_EQ(p.report.packed, 2u);
  EXPECT_EQ(p.report.rejected, 1u);
  EXPECT_EQ(p.report.listed, 3u);
  EXPECT_EQ(p.labels.at("k0"), 10);
  EXPECT_EQ(p.labels.at("k1"), 11);
  ASSERT_EQ(p.report.rejections.size(), 1u);
  const Rejection& x = p.report.rejections[0];
  EXPECT_NE(x.path.find("cut.tar"), std::string::npos) << x.path;
  EXPECT_NE(x.reason.find("k2.jpg at byte offset"), std::string::npos) << x.reason;
  EXPECT_NE(x.reason.find("runcated"), std::string::npos) << x.reason;
}

TEST(TarSourceTest, BadLabelSourceAndShuffleAreRefused) {
  TarListOptions t;
  t.label_from = "json:";
  EXPECT_FALSE(ValidateTarListOptions(t).ok());
  t.label_from = "txt";
  EXPECT_FALSE(ValidateTarListOptions(t).ok());
  const std::string dir = Scratch("refuse");
  fs::create_directories(dir);
  ASSERT_EQ(std::system(("tar -C '" + kPhotos + "' -cf '" + dir + "/a.tar' fruit").c_str()), 0);
  PackOptions o = Options(dir + "/a.tar", dir + "/out.kiln");
  o.shuffle_seed = 1;
  Result<PackReport> r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--shuffle-seed"), std::string::npos);
}

}  // namespace
}  // namespace kiln
