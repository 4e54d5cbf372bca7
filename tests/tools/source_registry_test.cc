// The same checks over every row of the input-source table (tools/sources/source_registry.h):
// an input of the kind is detected as that row, its listing is deterministic, keys are unique,
// a rejected item is named by its file and the item, `--part I --of N` covers every item exactly
// once, and every listed item's bytes read back as the photo it was made from. A new row must
// add its fixture to MakeInput (the test fails on a row without one).
#include "tools/sources/source_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/tfrecord_writer.h"
#include "tools/pack/partition.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";
const std::vector<std::string> kPhotoNames = {"animal/cat.jpg", "fruit/apple.jpg", "letter_f/f.png",
                                              "scene/beach.jpg"};

// An input of one source kind: what to pass as `kiln pack` input, and what names the one item
// the fixture makes rejectable (its file, and the item within it).
struct Fixture {
  std::string input;
  std::string bad_file;
  std::string bad_item;
};

std::vector<std::string> PhotoNames() {
  std::vector<std::string> names;
  for (const auto& c : fs::directory_iterator(kPhotos)) {
    if (!c.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(c.path())) {
      names.push_back(c.path().filename().string() + "/" + f.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Writes an input of `kind` made of the sample photos into `dir` (three files for a source
// split by file), with one item that listing rejects. Fails the test for an unknown kind.
Fixture MakeInput(const std::string& kind, const std::string& dir) {
  const std::vector<std::string> photos = PhotoNames();
  if (kind == "imagefolder") {
    for (const std::string& p : photos) {
      fs::create_directories(fs::path(dir + "/tree/" + p).parent_path());
      fs::copy_file(kPhotos + "/" + p, dir + "/tree/" + p);
    }
    fs::copy_file(kPhotos + "/" + photos[0], dir + "/tree/animal/bad\xff.jpg");
    return {dir + "/tree", dir + "/tree/animal", "bad"};
  }
  if (kind == "list") {
    std::string text;
    for (size_t i = 0; i < photos.size(); ++i) {
      text += kPhotos + "/" + photos[i] + " " + std::to_string(i) + "\n";
    }
    text += kPhotos + "/" + photos[0] + " not_a_label\n";
    testing::WriteFileString(dir + "/train.txt", text);
    return {dir + "/train.txt", "train.txt", "line " + std::to_string(photos.size() + 1)};
  }
  if (kind == "webdataset") {
    const std::string script = dir + "/make.py";
    testing::WriteFileString(script, R"PY(import io, os, tarfile
photos, dir = ")PY" + kPhotos + R"PY(", ")PY" +
                                         dir + R"PY("
names = )PY" + nlohmann::json(photos).dump() +
                                         R"PY(
def add(t, name, data):
    info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
for s in range(3):
    with tarfile.open(os.path.join(dir, "shard-%06d.tar" % s), "w", format=tarfile.GNU_FORMAT) as t:
        for i, n in enumerate(names):
            if i % 3 != s: continue
            key = "s%d_%02d" % (s, i)
            add(t, key + os.path.splitext(n)[1], open(os.path.join(photos, n), "rb").read())
            add(t, key + ".cls", str(i).encode())
        if s == 1:
            add(t, "bad.jpg", open(os.path.join(photos, names[0]), "rb").read())
            add(t, "bad.cls", b"abc")
)PY");
    EXPECT_EQ(std::system(("/usr/bin/python3 '" + script + "'").c_str()), 0);
    return {dir + "/shard-{000000..000002}.tar", "shard-000001.tar", "bad"};
  }
  if (kind == "tfrecord") {
    std::vector<nlohmann::json> files(3);
    for (size_t i = 0; i < photos.size(); ++i) {
      nlohmann::json features;
      features["image/encoded"] = {{"bytes_files", {kPhotos + "/" + photos[i]}}};
      features["image/class/label"] = {{"int64", {static_cast<int64_t>(i)}}};
      features["image/filename"] = {{"bytes", {photos[i]}}};
      files[i % 3]["records"].push_back({{"features", features}});
    }
    nlohmann::json no_image;
    no_image["image/class/label"] = {{"int64", {1}}};
    files[1]["records"].push_back({{"features", no_image}});
    for (int f = 0; f < 3; ++f) {
      files[f]["path"] = dir + "/train-0000" + std::to_string(f) + "-of-00003";
      files[f]["gzip"] = false;
    }
    testing::RunTFRecordWriter(dir, files);
    return {dir + "/train-{00000..00002}-of-00003", "train-00001-of-00003",
            "record " + std::to_string(files[1]["records"].size() - 1)};
  }
  ADD_FAILURE() << "no fixture for source kind " << kind << ": add one to MakeInput";
  return {};
}

// Lists `source`'s input `f` (the part `part` of `parts`, when parts > 1 and the source splits
// by file; else the whole input).
Result<SourceListing> List(const InputSource& source, const Fixture& f, uint32_t part,
                           uint32_t parts, std::vector<std::string>* files) {
  static const TarListOptions tar;
  static const TFRecordListOptions tfrecord;
  const SourceOptions options{&tar, &tfrecord};
  files->clear();
  if (source.expand != nullptr) {
    KILN_ASSIGN_OR_RETURN(*files, source.expand(f.input, true));
    const ItemRange r = PartRange(files->size(), part, parts);
    *files = std::vector<std::string>(files->begin() + static_cast<ptrdiff_t>(r.begin),
                                      files->begin() + static_cast<ptrdiff_t>(r.end));
  }
  const std::string root = fs::path(f.input).parent_path().string();
  return source.list(f.input, root, *files, options);
}

std::vector<std::string> Keys(const SourceListing& listing) {
  std::vector<std::string> keys;
  for (const SourceItem& item : listing.items) keys.push_back(item.key);
  return keys;
}

TEST(SourceRegistryTest, EveryRowPassesTheSameChecks) {
  ASSERT_GE(InputSources().size(), 4u);
  for (const InputSource& source : InputSources()) {
    SCOPED_TRACE(source.kind);
    const TempDir tmp;
    const Fixture f = MakeInput(source.kind, tmp.path());
    ASSERT_FALSE(f.input.empty());
    EXPECT_STREQ(DetectInputSource(f.input).kind, source.kind);
    EXPECT_EQ(FindInputSource(source.kind), &source);
    EXPECT_EQ(source.split_by_file, source.expand != nullptr);
    EXPECT_TRUE(source.validate({}, SourcePackContext{}).ok());

    std::vector<std::string> files;
    Result<SourceListing> first = List(source, f, 0, 1, &files);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    Result<SourceListing> again = List(source, f, 0, 1, &files);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(Keys(*first), Keys(*again)) << "listing order is not deterministic";
    const std::vector<std::string> keys = Keys(*first);
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size())
        << "keys are not unique";
    EXPECT_EQ(keys.size(), PhotoNames().size());

    // The one bad item is a rejection naming its file and the item.
    ASSERT_EQ(first->problems.size(), 1u);
    const SourceProblem& problem = first->problems[0];
    const std::string named = problem.path + " " + problem.reason +
                              (problem.line > 0 ? " line " + std::to_string(problem.line) : "");
    EXPECT_NE(named.find(f.bad_file), std::string::npos) << named;
    EXPECT_NE(named.find(f.bad_item), std::string::npos) << named;

    // Every item reads back as a photo's bytes.
    std::set<std::string> photo_bytes;
    for (const std::string& p : PhotoNames()) {
      photo_bytes.insert(testing::ReadFileString(kPhotos + "/" + p));
    }
    std::unique_ptr<SourceItemReader> reader;
    static const TarListOptions tar;
    static const TFRecordListOptions tfrecord;
    if (source.open_reader != nullptr) reader = source.open_reader(files, {&tar, &tfrecord});
    for (const SourceItem& item : first->items) {
      std::string bytes;
      if (reader) {
        ASSERT_TRUE(reader->Read(item, &bytes).ok()) << item.path;
      } else {
        bytes = testing::ReadFileString(item.path);
      }
      EXPECT_EQ(photo_bytes.count(bytes), 1u) << item.path;
    }

    // The part split (--part I --of 3) covers every item exactly once.
    std::multiset<std::string> covered;
    for (uint32_t part = 0; part < 3; ++part) {
      std::vector<std::string> part_keys;
      if (source.split_by_file) {
        Result<SourceListing> listing = List(source, f, part, 3, &files);
        ASSERT_TRUE(listing.ok()) << listing.status().ToString();
        part_keys = Keys(*listing);
      } else {
        const ItemRange r = PartRange(keys.size(), part, 3);
        part_keys.assign(keys.begin() + static_cast<ptrdiff_t>(r.begin),
                         keys.begin() + static_cast<ptrdiff_t>(r.end));
      }
      covered.insert(part_keys.begin(), part_keys.end());
    }
    EXPECT_EQ(covered, std::multiset<std::string>(keys.begin(), keys.end()));
  }
}

}  // namespace
}  // namespace kiln
