// TFRecord framing (tools/sources/tfrecord_reader.h) on files written by an independent writer
// (tests/tools/tfrecord_writer.py: python3-crc32c and Python's struct), then damaged: a flipped
// data byte, a flipped length-CRC byte, a flipped length byte, a tail cut in the data and in a
// header, a length of 2^63, a gzip file and a ZLIB-compressed one.
#include "tools/sources/tfrecord_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/tfrecord_writer.h"
namespace kiln {
namespace {

namespace fs = std::filesystem;

nlohmann::json RawFile(const std::string& path, const std::vector<std::string>& records,
                       bool gzip = false) {
  nlohmann::json f;
  f["path"] = path;
  f["gzip"] = gzip;
  f["records"] = nlohmann::json::array();
  for (const std::string& r : records) f["records"].push_back({{"raw", r}});
  return f;
}

const std::vector<std::string> kThree = {"first record", "", std::string(1000, 'x') + "end"};

struct Read {
  TFRecordRead kind;
  std::string data, problem;
  uint64_t index, offset;
};

std::vector<Read> ReadEverything(const std::string& path) {
  Result<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<Read> out;
  if (!r.ok()) return out;
  for (int guard = 0; guard < 100; ++guard) {
    Read x;
    x.kind = (*r)->Next(&x.data, &x.problem);
    x.index = (*r)->record_index();
    x.offset = (*r)->record_offset();
    if (x.kind == TFRecordRead::kEnd) break;
    out.push_back(std::move(x));
  }
  return out;
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::string bytes = testing::ReadFileString(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x40);
  testing::WriteFileString(path, bytes);
}

TEST(TFRecordReaderTest, ReadsEveryRecordOfAnIndependentWriter) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(dir + "/a.tfrecord", kThree)});
  const std::vector<Read> got = ReadEverything(dir + "/a.tfrecord");
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].kind, TFRecordRead::kRecord) << got[i].problem;
    EXPECT_EQ(got[i].data, kThree[i]);
    EXPECT_EQ(got[i].index, i);
    EXPECT_EQ(got[i].offset, w["files"][0]["offsets"][i].get<uint64_t>());
  }
  // 12 + 12 + 4 + 4 + 12 + 1003 + 4: the framing adds 16 bytes a record.
  EXPECT_EQ(fs::file_size(dir + "/a.tfrecord"), 3 * 16 + 12 + 0 + 1003);
  testing::WriteFileString(dir + "/empty.tfrecord", "");
  EXPECT_TRUE(ReadEverything(dir + "/empty.tfrecord").empty());
}

// The bytes of tools/sources/pack_inputs.md's "TFRecord framing" examples: an empty record, then
// one holding "hello".
TEST(TFRecordReaderTest, TheSpecsWorkedExampleParses) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const unsigned char bytes[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x29, 0x03,
                                 0x98, 0x07, 0xd8, 0xea, 0x82, 0xa2, 0x05, 0x00, 0x00, 0x00,
                                 0x00, 0x00, 0x00, 0x00, 0xea, 0xb2, 0x04, 0x3e, 'h',  'e',
                                 'l',  'l',  'o',  0xbb, 0x1f, 0x1c, 0x19};
  testing::WriteFileString(dir + "/spec.tfrecord",
                           std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  const std::vector<Read> got = ReadEverything(dir + "/spec.tfrecord");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].kind, TFRecordRead::kRecord) << got[0].problem;
  EXPECT_EQ(got[0].data, "");
  EXPECT_EQ(got[1].kind, TFRecordRead::kRecord) << got[1].problem;
  EXPECT_EQ(got[1].data, "hello");
  EXPECT_EQ(got[1].offset, 16u);
}

TEST(TFRecordReaderTest, FlippedDataByteRejectsThatRecordOnly) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string path = dir + "/a.tfrecord";
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(path, kThree)});
  const uint64_t second = w["files"][0]["offsets"][2].get<uint64_t>();
  FlipByte(path, second + 12 + 500);
  const std::vector<Read> got = ReadEverything(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind, TFRecordRead::kRecord);
  EXPECT_EQ(got[1].kind, TFRecordRead::kRecord);
  EXPECT_EQ(got[2].kind, TFRecordRead::kBadRecord);
  EXPECT_EQ(got[2].problem.rfind("record 2 at byte offset " + std::to_string(second) +
                                     ": data CRC32C mismatch (stored 0x",
                                 0),
            0u)
      << got[2].problem;
  EXPECT_NE(got[2].problem.find(", computed 0x"), std::string::npos) << got[2].problem;

  // A flipped data CRC byte is the same rejection; the record after it is still read.
  const std::string path2 = dir + "/b.tfrecord";
  const nlohmann::json w2 = testing::RunTFRecordWriter(dir, {RawFile(path2, kThree)});
  const uint64_t first_end = w2["files"][0]["offsets"][1].get<uint64_t>();
  FlipByte(path2, first_end - 1);
  const std::vector<Read> got2 = ReadEverything(path2);
  ASSERT_EQ(got2.size(), 3u);
  EXPECT_EQ(got2[0].kind, TFRecordRead::kBadRecord);
  EXPECT_NE(got2[0].problem.find("record 0 at byte offset 0: data CRC32C mismatch"),
            std::string::npos)
      << got2[0].problem;
  EXPECT_EQ(got2[1].kind, TFRecordRead::kRecord);
  EXPECT_EQ(got2[2].kind, TFRecordRead::kRecord);
  EXPECT_EQ(got2[2].data, kThree[2]);
}

TEST(TFRecordReaderTest, FlippedLengthOrLengthCrcStopsTheFile) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  for (const uint64_t within : {uint64_t{9}, uint64_t{2}}) {  // a length-CRC byte, a length byte
    const std::string path = dir + "/a" + std::to_string(within) + ".tfrecord";
    const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(path, kThree)});
    const uint64_t second = w["files"][0]["offsets"][1].get<uint64_t>();
    FlipByte(path, second + within);
    const std::vector<Read> got = ReadEverything(path);
    ASSERT_EQ(got.size(), 2u) << within;
    EXPECT_EQ(got[0].kind, TFRecordRead::kRecord);
    EXPECT_EQ(got[1].kind, TFRecordRead::kBadStream);
    EXPECT_NE(got[1].problem.find("record 1 at byte offset " + std::to_string(second) +
                                  ": length CRC32C mismatch (stored 0x"),
              std::string::npos)
        << got[1].problem;
    EXPECT_NE(got[1].problem.find("the rest of the file is not read"), std::string::npos);
  }
}

TEST(TFRecordReaderTest, TruncatedTailIsOneProblem) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string path = dir + "/a.tfrecord";
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(path, kThree)});
  const uint64_t last = w["files"][0]["offsets"][2].get<uint64_t>();
  fs::resize_file(path, last + 12 + 600);  // inside the last record's data
  std::vector<Read> got = ReadEverything(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].kind, TFRecordRead::kBadStream);
  EXPECT_NE(got[2].problem.find("record 2 at byte offset " + std::to_string(last) +
                                ": truncated: the file ends after 600 of the record's 1003 data "
                                "bytes (its 4 CRC bytes missing)"),
            std::string::npos)
      << got[2].problem;
  // Inside the CRC: every data byte is there, 2 of the 4 CRC bytes (not "1005 of 1003").
  fs::resize_file(path, last + 12 + 1003 + 2);
  got = ReadEverything(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NE(got[2].problem.find("truncated: the file ends after the record's 1003 data bytes and "
                                "2 of its 4 CRC bytes"),
            std::string::npos)
      << got[2].problem;
  fs::resize_file(path, last + 5);  // inside its header
  got = ReadEverything(path);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NE(
      got[2].problem.find("truncated: the file ends 5 bytes into the record's 12-byte header"),
      std::string::npos)
      << got[2].problem;
}

// A length field of 2^63 (its CRC correct) is refused without allocating it.
TEST(TFRecordReaderTest, HugeLengthDoesNotAllocate) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string path = dir + "/a.tfrecord";
  nlohmann::json f = RawFile(path, {"ok"});
  f["records"].push_back({{"header_only", uint64_t{1} << 63}});
  testing::RunTFRecordWriter(dir, {f});
  const std::vector<Read> got = ReadEverything(path);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].data, "ok");
  EXPECT_EQ(got[1].kind, TFRecordRead::kBadStream);
  EXPECT_NE(got[1].problem.find("record data of 9223372036854775808 bytes is over the limit of "
                                "1073741824 bytes (1 GiB), and the file ends inside it"),
            std::string::npos)
      << got[1].problem;
  // A length just over the limit, file short: the same, no 1 GiB allocation either.
  nlohmann::json g = RawFile(dir + "/b.tfrecord", {});
  g["records"].push_back({{"header_only", kMaxTFRecordBytes + 1}});
  testing::RunTFRecordWriter(dir, {g});
  const std::vector<Read> got2 = ReadEverything(dir + "/b.tfrecord");
  ASSERT_EQ(got2.size(), 1u);
  EXPECT_EQ(got2[0].kind, TFRecordRead::kBadStream);
  // Under the limit but more than the file holds: truncated, reading only what is there.
  nlohmann::json h = RawFile(dir + "/c.tfrecord", {});
  h["records"].push_back({{"header_only", kMaxTFRecordBytes}});
  testing::RunTFRecordWriter(dir, {h});
  const std::vector<Read> got3 = ReadEverything(dir + "/c.tfrecord");
  ASSERT_EQ(got3.size(), 1u);
  EXPECT_NE(got3[0].problem.find("truncated: the file ends after 0 of the record's 1073741824"),
            std::string::npos)
      << got3[0].problem;
}

TEST(TFRecordReaderTest, GzipFilesAreReadAndZlibFilesNamed) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string path = dir + "/a.tfrecord.gz";
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(path, kThree, /*gzip=*/true)});
  std::vector<Read> got = ReadEverything(path);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].data, kThree[i]);
    EXPECT_EQ(got[i].offset, w["files"][0]["offsets"][i].get<uint64_t>());
  }
  {
    Result<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path);
    ASSERT_TRUE(r.ok());
    std::string data, problem;
    ASSERT_EQ((*r)->Next(&data, &problem), TFRecordRead::kRecord);
    EXPECT_TRUE((*r)->compressed());
    // Back to record 2, forward, then back to 0: the decompressed offsets as listed.
    ASSERT_TRUE((*r)->Seek(2, w["files"][0]["offsets"][2].get<uint64_t>()).ok());
    ASSERT_EQ((*r)->Next(&data, &problem), TFRecordRead::kRecord);
    EXPECT_EQ(data, kThree[2]);
    ASSERT_TRUE((*r)->Seek(0, 0).ok());
    ASSERT_EQ((*r)->Next(&data, &problem), TFRecordRead::kRecord);
    EXPECT_EQ(data, kThree[0]);
  }
  // A gzip file cut short: the record it cuts is the one problem.
  std::string gz = testing::ReadFileString(path);
  testing::WriteFileString(dir + "/cut.tfrecord.gz", gz.substr(0, gz.size() - 12));
  got = ReadEverything(dir + "/cut.tfrecord.gz");
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().kind, TFRecordRead::kBadStream);
  EXPECT_NE(got.back().problem.find("of the decompressed stream"), std::string::npos)
      << got.back().problem;
  // TFRecordOptions compression ZLIB: a zlib stream, refused with the reason.
  ASSERT_EQ(std::system(("/usr/bin/python3 -c \"import zlib; d=open('" + dir +
                         "/a.tfrecord.gz','rb').read(); import gzip; "
                         "open('" +
                         dir + "/z.tfrecord','wb').write(zlib.compress(gzip.decompress(d)))\"")
                            .c_str()),
            0);
  got = ReadEverything(dir + "/z.tfrecord");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].problem.find("compression ZLIB is not read"), std::string::npos)
      << got[0].problem;
}

TEST(TFRecordReaderTest, SeekReadsAListedRecordAndMissingFilesAreErrors) {
  const TempDir tmp;
  const std::string& dir = tmp.path();
  const std::string path = dir + "/a.tfrecord";
  const nlohmann::json w = testing::RunTFRecordWriter(dir, {RawFile(path, kThree)});
  Result<std::unique_ptr<TFRecordReader>> r = TFRecordReader::Open(path);
  ASSERT_TRUE(r.ok());
  std::string data, problem;
  ASSERT_TRUE((*r)->Seek(2, w["files"][0]["offsets"][2].get<uint64_t>()).ok());
  ASSERT_EQ((*r)->Next(&data, &problem), TFRecordRead::kRecord);
  EXPECT_EQ(data, kThree[2]);
  EXPECT_EQ((*r)->record_index(), 2u);
  ASSERT_TRUE((*r)->Seek(1, w["files"][0]["offsets"][1].get<uint64_t>()).ok());
  ASSERT_EQ((*r)->Next(&data, &problem), TFRecordRead::kRecord);
  EXPECT_EQ(data, "");
  Result<std::unique_ptr<TFRecordReader>> missing = TFRecordReader::Open(dir + "/none.tfrecord");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("none.tfrecord"), std::string::npos);
  EXPECT_FALSE(TFRecordReader::Open(dir).ok());
}

}  // namespace
}  // namespace kiln
