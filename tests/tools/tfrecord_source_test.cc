// TFRecord files of tf.train.Example records as converter input (tools/sources/tfrecord_source.h),
// written by an independent writer (tests/tools/tfrecord_writer.py: python3-protobuf and
// python3-crc32c): the shipped sample photos as records pack to the same tensors and shard
// bytes as the same photos packed as an ImageFolder, for 1 and 2 threads, plain and gzip;
// damaged records (a flipped data byte, a flipped length-CRC byte, a truncated tail) and
// records that are not samples (no image feature, a float label, two images, a duplicate key)
// are rejections naming the file, the record and its byte offset, and every record is
// accounted for; file names, directories and patterns; --part split by file and merged;
// --shuffle-seed refused.
#include "tools/sources/tfrecord_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/dataset.h"
#include "tests/test_util.h"
#include "tests/tools/pack_and_read.h"
#include "tests/tools/tfrecord_writer.h"
#include "tools/pack/packer.h"
#include "tools/pack/part_merger.h"
#include "tools/pack/partition.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::PackAndRead;
using testing::Packed;
using testing::PackInputOptions;
using testing::ReadBack;
using testing::ShardBytes;

const std::string kPhotos = std::string(KILN_SOURCE_DIR) + "/samples/photos";
const std::vector<std::string> kClasses = {"animal", "fruit", "letter_f", "scene"};

// One Example record: the photo's bytes, a label, and the ImageFolder key as image/filename.
nlohmann::json PhotoRecord(const std::string& relative, int64_t label) {
  nlohmann::json features;
  features["image/encoded"] = {{"bytes_files", {kPhotos + "/" + relative}}};
  features["image/class/label"] = {{"int64", {label}}};
  features["image/filename"] = {{"bytes", {relative}}};
  return {{"features", features}};
}

// Every photo of samples/photos in ImageFolder order (class, then name), with its class label.
std::vector<std::pair<std::string, int64_t>> Photos() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t c = 0; c < kClasses.size(); ++c) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(kPhotos + "/" + kClasses[c])) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& n : names) out.emplace_back(kClasses[c] + "/" + n, c);
  }
  return out;
}

nlohmann::json File(const std::string& path, const std::vector<nlohmann::json>& records,
                    bool gzip = false) {
  return {{"path", path}, {"gzip", gzip}, {"records", records}};
}

std::string Reasons(const PackReport& r) {
  std::string out;
  for (const Rejection& x : r.rejections) out += x.path + ": " + x.reason + "\n";
  return out;
}

TEST(TFRecordSourceTest, NamesDirectoriesAndPatterns) {
  for (const char* yes :
       {"a.tfrecord", "x/B.TFRecords", "c.tfrec", "d.tfrecord.gz", "train-00000-of-01024",
        "mnist-train.tfrecord-00000-of-00001", "data/train-{00000..01023}-of-01024",
        "data/*.tfrecord", "d/t-*-of-00009"}) {
    EXPECT_TRUE(HasTFRecordName(yes)) << yes;
  }
  for (const char* no : {"a.tar", "a.tfrecord.txt", "list.txt", "part-0-of-1", "x-00000-of-",
                         "train00000-of-01024", "photo.jpg"}) {
    EXPECT_FALSE(HasTFRecordName(no)) << no;
  }
  const TempDir tmp;
  const std::string& dir = tmp.path();
  for (const char* n : {"train-00000-of-00003", "train-00001-of-00003", "train-00002-of-00003"}) {
    testing::WriteFileString(dir + "/" + n, "");
  }
  EXPECT_TRUE(IsTFRecordInput(dir));
  EXPECT_TRUE(IsTFRecordInput(dir + "/train-{00000..00002}-of-00003"));
  EXPECT_FALSE(IsTFRecordInput(kPhotos));
  Result<std::vector<std::string>> r = ExpandTFRecordInput(dir + "/train-{00000..00002}-of-00003");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(r->back(), dir + "/train-00002-of-00003");
  r = ExpandTFRecordInput(dir);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->front(), dir + "/train-00000-of-00003");
  r = ExpandTFRecordInput(dir + "/train-{00000..00003}-of-00003");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TFRecord file " + dir + "/train-00003-of-00003"),
            std::string::npos)
      << r.status().ToString();
  TFRecordListOptions o;
  EXPECT_TRUE(ValidateTFRecordListOptions(o).ok());
  o.feature_key = o.feature_image;
  EXPECT_FALSE(ValidateTFRecordListOptions(o).ok());
  o = {};
  o.feature_label = "";
  EXPECT_FALSE(ValidateTFRecordListOptions(o).ok());
}

// samples/photos as records of two files (the first 10 and the rest), keys from image/filename:
// the tensors, labels, keys and the shard bytes equal the ImageFolder pack of samples/photos;
// 1 and 2 threads give the same bytes; so does the same pair of files gzip-compressed.
TEST(TFRecordSourceTest, SamplePhotosEqualTheImageFolder) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const auto photos = Photos();
  ASSERT_EQ(photos.size(), 23u);
  std::vector<nlohmann::json> first, rest;
  for (size_t i = 0; i < photos.size(); ++i) {
    (i < 10 ? first : rest).push_back(PhotoRecord(photos[i].first, photos[i].second));
  }
  testing::RunTFRecordWriter(
      dir, {File(dir + "/photos-00000-of-00002", first), File(dir + "/photos-00001-of-00002", rest),
            File(dir + "/gz/photos-00000-of-00002.tfrecord.gz", first, true),
            File(dir + "/gz/photos-00001-of-00002.tfrecord.gz", rest, true)});
  PackOptions tf = PackInputOptions(dir + "/photos-{00000..00001}-of-00002", dir + "/tf.kiln");
  tf.tfrecord.feature_key = "image/filename";
  const Packed from_tf = PackAndRead(tf);
  const Packed from_folder = PackAndRead(PackInputOptions(kPhotos, dir + "/folder.kiln"));
  ASSERT_EQ(from_folder.tensors.size(), 23u);
  ASSERT_EQ(from_tf.tensors.size(), 23u);
  EXPECT_EQ(from_tf.report.listed, 23u);
  EXPECT_EQ(from_tf.report.rejected, 0u) << Reasons(from_tf.report);
  EXPECT_EQ(from_tf.keys, from_folder.keys);
  for (const auto& [key, tensor] : from_folder.tensors) {
    ASSERT_EQ(from_tf.tensors.count(key), 1u) << key;
    EXPECT_EQ(from_tf.tensors.at(key), tensor) << key;
    EXPECT_EQ(from_tf.labels.at(key), from_folder.labels.at(key)) << key;
  }
  EXPECT_EQ(ShardBytes(tf.output), ShardBytes(from_folder.report.output));
  EXPECT_EQ(nlohmann::json::parse(from_tf.report.manifest.source_json).at("kind"), "tfrecord");

  PackOptions one_thread = tf;
  one_thread.threads = 1;
  one_thread.output = dir + "/tf1.kiln";
  ASSERT_TRUE(Pack(one_thread).ok());
  EXPECT_EQ(ShardBytes(one_thread.output), ShardBytes(tf.output));

  PackOptions gz = tf;
  gz.input = dir + "/gz";  // a directory of .tfrecord.gz files
  gz.output = dir + "/gz.kiln";
  const Packed from_gz = PackAndRead(gz);
  EXPECT_EQ(from_gz.report.packed, 23u);
  EXPECT_EQ(ShardBytes(gz.output), ShardBytes(tf.output));

  // Default keys: FILE_BASENAME:RECORD_INDEX.
  PackOptions plain = PackInputOptions(dir + "/photos-*-of-00002", dir + "/plain.kiln");
  const Packed p = PackAndRead(plain);
  ASSERT_EQ(p.keys.size(), 23u);
  EXPECT_EQ(p.keys[0], "photos-00000-of-00002:0");
  EXPECT_EQ(p.keys[10], "photos-00001-of-00002:0");
  EXPECT_EQ(p.tensors.at("photos-00001-of-00002:12"), from_folder.tensors.at(photos[22].first));
}

// Damage in three of four files: a flipped data byte (that record only), a flipped length-CRC
// byte (the rest of that file), a truncated tail (the cut record). Every record written is
// packed, rejected, or after a framing error in its file.
TEST(TFRecordSourceTest, DamagedRecordsAreRejectionsNamingRecordAndOffset) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const auto photos = Photos();
  std::vector<nlohmann::json> four;
  for (size_t i = 0; i < 4; ++i) four.push_back(PhotoRecord(photos[i].first, photos[i].second));
  const std::string f0 = dir + "/d-00000-of-00004", f1 = dir + "/d-00001-of-00004",
                    f2 = dir + "/d-00002-of-00004", f3 = dir + "/d-00003-of-00004";
  const nlohmann::json w = testing::RunTFRecordWriter(
      dir, {File(f0, four), File(f1, four), File(f2, four), File(f3, four)});
  auto offset = [&](int file, int record) {
    return w["files"][file]["offsets"][record].get<uint64_t>();
  };
  auto flip = [&](const std::string& path, uint64_t at) {
    std::string b = testing::ReadFileString(path);
    b[at] = static_cast<char>(b[at] ^ 0x01);
    testing::WriteFileString(path, b);
  };
  flip(f1, offset(1, 1) + 12 + 100);       // inside record 1's data
  flip(f2, offset(2, 2) + 8);              // record 2's length CRC
  fs::resize_file(f3, offset(3, 3) + 40);  // inside record 3
  const Packed p =
      PackAndRead(PackInputOptions(dir + "/d-{00000..00003}-of-00004", dir + "/out.kiln"));
  const PackReport& r = p.report;
  const std::string reasons = Reasons(r);
  // f0: 4 packed; f1: 3 packed + 1 rejected; f2: 2 packed + 1 rejected (then not read); f3: 3
  // packed + 1 rejected.
  EXPECT_EQ(r.packed, 12u) << reasons;
  EXPECT_EQ(r.rejected, 3u) << reasons;
  EXPECT_EQ(r.listed, r.packed + r.rejected);
  ASSERT_EQ(r.rejections.size(), 3u) << reasons;
  EXPECT_EQ(r.rejections[0].path, f1);
  EXPECT_EQ(r.rejections[0].reason.rfind("record 1 at byte offset " + std::to_string(offset(1, 1)) +
                                             ": data CRC32C mismatch (stored 0x",
                                         0),
            0u)
      << reasons;
  EXPECT_EQ(r.rejections[1].path, f2);
  EXPECT_NE(r.rejections[1].reason.find("record 2 at byte offset " + std::to_string(offset(2, 2)) +
                                        ": length CRC32C mismatch"),
            std::string::npos)
      << reasons;
  EXPECT_EQ(r.rejections[2].path, f3);
  EXPECT_NE(r.rejections[2].reason.find("record 3 at byte offset " + std::to_string(offset(3, 3)) +
                                        ": truncated"),
            std::string::npos)
      << reasons;
  EXPECT_EQ(p.tensors.count("d-00001-of-00004:1"), 0u);
  EXPECT_EQ(p.tensors.count("d-00001-of-00004:2"), 1u);  // read on after the bad data CRC
  EXPECT_EQ(p.tensors.count("d-00002-of-00004:3"), 0u);

  // --on-error fail stops at the first, naming it.
  PackOptions fail = PackInputOptions(dir + "/d-{00000..00003}-of-00004", dir + "/fail.kiln");
  fail.on_error = OnError::kFail;
  Result<PackReport> failed = Pack(fail);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(f1 + ": record 1 at byte offset"), std::string::npos)
      << failed.status().ToString();
  EXPECT_FALSE(fs::exists(fail.output));
}

// Records that parse but are not samples, each a rejection with the reason; a record that is
// not an Example; a duplicate --feature-key.
TEST(TFRecordSourceTest, RecordsThatAreNotSamplesAreRejectedWithTheReason) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string apple = kPhotos + "/fruit/apple.jpg";
  auto record = [&](nlohmann::json features) { return nlohmann::json{{"features", features}}; };
  nlohmann::json good = {{"image/encoded", {{"bytes_files", {apple}}}},
                         {"image/class/label", {{"int64", {7}}}},
                         {"image/filename", {{"bytes", {"apple"}}}}};
  nlohmann::json no_image = good;
  no_image.erase("image/encoded");
  no_image["image/filename"] = {{"bytes", {"no_image"}}};
  nlohmann::json float_label = good;
  float_label["image/class/label"] = {{"float", {1.0}}};
  float_label["image/filename"] = {{"bytes", {"float_label"}}};
  nlohmann::json two_images = good;
  two_images["image/encoded"] = {{"bytes_files", {apple, apple}}};
  two_images["image/filename"] = {{"bytes", {"two_images"}}};
  nlohmann::json two_labels = good;
  two_labels["image/class/label"] = {{"int64", {1, 2}}};
  two_labels["image/filename"] = {{"bytes", {"two_labels"}}};
  nlohmann::json not_image = good;
  not_image["image/encoded"] = {{"bytes", {"these bytes are not an image"}}};
  not_image["image/filename"] = {{"bytes", {"not_image"}}};
  const std::string path = dir + "/f.tfrecord";
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {File(path, {record(good),
                                                                        record(no_image),
                                                                        record(float_label),
                                                                        record(two_images),
                                                                        record(two_labels),
                                                                        {{"raw_hex", "08ff"}},
                                                                        record(good),
                                                                        record(not_image)})});
  PackOptions o = PackInputOptions(path, dir + "/out.kiln");
  o.tfrecord.feature_key = "image/filename";
  const Packed p = PackAndRead(o);
  const PackReport& r = p.report;
  const std::string reasons = Reasons(r);
  EXPECT_EQ(r.listed, 8u) << reasons;
  EXPECT_EQ(r.packed, 1u) << reasons;
  EXPECT_EQ(r.rejected, 7u) << reasons;
  EXPECT_EQ(p.labels.at("apple"), 7);
  auto has = [&](int i, const std::string& why) {
    const std::string want = "record " + std::to_string(i) + " at byte offset " +
                             std::to_string(w["files"][0]["offsets"][i].get<uint64_t>()) + ": " +
                             why;
    EXPECT_NE(reasons.find(want), std::string::npos) << want << "\n" << reasons;
  };
  has(1,
      "no feature image/encoded (--feature-image); features: image/class/label, "
      "image/filename");
  has(2, "feature image/class/label is a float_list, not an int64_list");
  has(3, "feature image/encoded holds 2 values; one is needed");
  has(4, "feature image/class/label holds 2 values; one integer label is needed");
  has(5, "the record's 2 bytes do not parse as a tf.train.Example protobuf");
  has(6, "key apple is already the key of record 0 of " + path);
  // The decoder's rejection names the record as FILE:INDEX.
  EXPECT_NE(reasons.find(path + ":7: "), std::string::npos) << reasons;
}

// tests/data/tfrecord/golden.tfrecord (its README says how it was made): both records, at
// the offsets written down, with their keys and labels; the tensors equal the two PNGs packed
// as an ImageFolder with the same class ids.
TEST(TFRecordSourceTest, GoldenFileListsAndPacks) {
  const std::string golden = std::string(KILN_SOURCE_DIR) + "/tests/data/tfrecord/golden.tfrecord";
  TFRecordListOptions lo;
  lo.feature_key = "image/filename";
  Result<SourceListing> listing = ListTFRecordFiles({golden}, lo);
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->items.size(), 2u);
  EXPECT_TRUE(listing->problems.empty());
  EXPECT_EQ(listing->items[0].key, "0_T-shirt_top/train-00001.png");
  EXPECT_EQ(listing->items[0].label, 0);
  EXPECT_EQ(listing->items[0].record_offset, 0u);
  EXPECT_EQ(listing->items[1].key, "7_Sneaker/train-00006.png");
  EXPECT_EQ(listing->items[1].label, 7);
  EXPECT_EQ(listing->items[1].record_offset, 687u);
  EXPECT_EQ(listing->items[1].member_index, 1u);
  TFRecordSampleReader reader({golden}, lo);
  std::string image;
  ASSERT_TRUE(reader.Read(0, 1, 687, &image).ok());
  const std::string fmnist = std::string(KILN_SOURCE_DIR) + "/samples/fashion-mnist";
  EXPECT_EQ(image, testing::ReadFileString(fmnist + "/7_Sneaker/train-00006.png"));

  const TempDir tmp;
  const std::string& dir = tmp.path();
  PackOptions o = PackInputOptions(golden, dir + "/tf.kiln");
  o.tfrecord.feature_key = "image/filename";
  const Packed p = PackAndRead(o);
  testing::WriteFileString(dir + "/list.txt",
                           "0_T-shirt_top/train-00001.png 0\n7_Sneaker/train-00006.png 7\n");
  PackOptions list = PackInputOptions(dir + "/list.txt", dir + "/list.kiln");
  list.root = fmnist;
  const Packed q = PackAndRead(list);
  ASSERT_EQ(p.keys, q.keys);
  EXPECT_EQ(p.tensors, q.tensors);
  EXPECT_EQ(p.labels, q.labels);
  EXPECT_EQ(ShardBytes(o.output), ShardBytes(list.output));
}

// Every regular file under `dir` (relative name -> bytes).
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = testing::ReadFileString(e.path());
  }
  return files;
}

// TFRecord input is split by file, as tar input is by shard file: the photos in five files
// (one record in file 3 damaged), parts 0..2 of 3 packed one by one take files [0,1), [1,3),
// [3,5), only their own files need to exist, and the merged parts equal `--of 3` in one
// process byte for byte (data files, kiln.json, rejected.tsv). --shuffle-seed is refused.
TEST(TFRecordSourceTest, PartsSplitByFileAndMergeToTheWholePack) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const auto photos = Photos();
  std::vector<std::vector<nlohmann::json>> records(5);
  for (size_t i = 0; i < photos.size(); ++i) {
    records[i % 5].push_back(PhotoRecord(photos[i].first, photos[i].second));
  }
  std::vector<nlohmann::json> files;
  for (int f = 0; f < 5; ++f) {
    files.push_back(File(dir + "/p-0000" + std::to_string(f) + "-of-00005", records[f]));
  }
  const nlohmann::json w = testing::RunTFRecordWriter(dir, files);
  {
    const std::string f3 = dir + "/p-00003-of-00005";
    std::string b = testing::ReadFileString(f3);
    const uint64_t at = w["files"][3]["offsets"][1].get<uint64_t>() + 12 + 50;
    b[at] = static_cast<char>(b[at] ^ 0x01);
    testing::WriteFileString(f3, b);
  }
  const std::string pattern = dir + "/p-{00000..00004}-of-00005";
  PackOptions whole = PackInputOptions(pattern, dir + "/whole.kiln");
  whole.shard_size_bytes = 20000;
  whole.part_count = 3;
  Result<PackReport> wr = Pack(whole);
  ASSERT_TRUE(wr.ok()) << wr.status().ToString();
  EXPECT_EQ(wr->packed, 22u);
  EXPECT_EQ(wr->rejected, 1u);
  const std::vector<ItemRange> ranges = {{0, 1}, {1, 3}, {3, 5}};
  for (uint32_t i = 0; i < 3; ++i) {
    PackOptions o = PackInputOptions(pattern, dir + "/job.kiln");
    o.shard_size_bytes = 20000;
    o.part_index = i;
    o.part_count = 3;
    Result<PackReport> r = Pack(o);
    ASSERT_TRUE(r.ok()) << "part " << i << ": " << r.status().ToString();
    ASSERT_TRUE(r->partition.has_value());
    EXPECT_TRUE(r->partition->split_by_shards);
    EXPECT_EQ(r->partition->shards, ranges[i]) << i;
    EXPECT_EQ(r->partition->listed_shards, 5u);
  }
  const auto part1 = Files(dir + "/job.kiln.parts/" + PartDirectoryName(1, 3));
  MergeOptions m;
  m.inputs = {dir + "/job.kiln.parts"};
  m.output = dir + "/job.kiln";
  Result<MergeReport> merged = MergeParts(m);
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  const auto expected = Files(whole.output);
  const auto got = Files(m.output);
  EXPECT_EQ(got.size(), expected.size());
  for (const auto& [name, bytes] : expected) {
    ASSERT_EQ(got.count(name), 1u) << name;
    EXPECT_TRUE(got.at(name) == bytes) << name << " differs";
  }
  // Part 1 needs only files 1 and 2: with file 0 gone it packs as before; part 0 is refused.
  fs::remove(dir + "/p-00000-of-00005");
  PackOptions o = PackInputOptions(pattern, dir + "/after.kiln");
  o.shard_size_bytes = 20000;
  o.part_index = 1;
  o.part_count = 3;
  ASSERT_TRUE(Pack(o).ok());
  EXPECT_EQ(Files(dir + "/after.kiln.parts/" + PartDirectoryName(1, 3)), part1);
  o.part_index = 0;
  Result<PackReport> r = Pack(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TFRecord file " + dir + "/p-00000-of-00005"),
            std::string::npos)
      << r.status().ToString();

  PackOptions shuffled = PackInputOptions(dir + "/p-00001-of-00005", dir + "/shuffled.kiln");
  shuffled.shuffle_seed = 3;
  r = Pack(shuffled);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--shuffle-seed is not supported for TFRecord files"),
            std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace kiln
