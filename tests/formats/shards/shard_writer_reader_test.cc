// Tests for formats/shards/shard_writer.h and formats/shards/shard_reader.h: round trips,
// alignment, projected sizes, atomic finish, open errors and the location named by every per-record
// error.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/shards/shard_format.h"
#include "formats/shards/shard_reader.h"
#include "formats/shards/shard_writer.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TensorSchema Schema(uint32_t h, uint32_t w, uint32_t c, DType dtype = DType::kUint8) {
  TensorSchema s;
  s.dtype = dtype;
  s.height = h;
  s.width = w;
  s.channels = c;
  return s;
}

ShardHeader Header(const TensorSchema& schema, uint32_t alignment = kDefaultRecordAlignment) {
  ShardHeader h;
  h.schema = schema;
  h.record_alignment = alignment;
  return h;
}

// Sample i's raw bytes: compressible for even i, pseudo-random for odd i.
std::vector<uint8_t> SampleBytes(uint64_t n, uint64_t i) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(static_cast<uint32_t>(i));
  for (uint64_t j = 0; j < n; ++j) {
    v[j] = (i % 2 == 0) ? static_cast<uint8_t>((j / 8 + i) % 5) : static_cast<uint8_t>(rng());
  }
  return v;
}

std::string KeyOf(uint64_t i) {
  return "class" + std::to_string(i % 3) + "/img_" + std::string(i % 7, 'x') + std::to_string(i) +
         ".png";
}

EncodedRecord Encode(RecordEncoder* enc, const TensorSchema& s, uint64_t i) {
  const std::vector<uint8_t> raw = SampleBytes(s.sample_bytes(), i);
  EncodedRecord rec;
  EXPECT_TRUE(
      enc->Encode(raw.data(), raw.size(), static_cast<int64_t>(i) - 50, KeyOf(i), &rec).ok());
  return rec;
}

TEST(ShardWriterReaderTest, RoundTripManyRecordsMixedCodecs) {
  TempDir dir;
  const std::string path = dir / "a.kiln";
  const TensorSchema schema = Schema(16, 16, 3);
  RecordEncoder enc(*Compression::Parse("zstd:1"));
  ShardHeader header = Header(schema);
  header.shard_index = 4;
  header.first_sample = 1000;
  auto writer = ShardWriter::Create(path, header);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  constexpr uint64_t kRecords = 500;
  for (uint64_t i = 0; i < kRecords; ++i) {
    ASSERT_TRUE((*writer)->Add(Encode(&enc, schema, i)).ok());
    EXPECT_EQ((*writer)->record_count(), i + 1);
  }
  auto info = (*writer)->Finish();
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->file, "a.kiln");
  EXPECT_EQ(info->samples, kRecords);
  const std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  EXPECT_EQ(info->bytes, bytes.size());
  EXPECT_EQ(info->xxh3_64, RecordChecksum(bytes.data(), bytes.size(), 0));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const ShardReader& r = **reader;
  EXPECT_EQ(r.record_count(), kRecords);
  EXPECT_EQ(r.header().schema, schema);
  EXPECT_EQ(r.header().shard_index, 4u);
  EXPECT_EQ(r.header().first_sample, 1000u);
  EXPECT_EQ(r.file_bytes(), bytes.size());
  EXPECT_TRUE(r.VerifyIndexChecksum().ok());
  RecordDecoder dec;
  std::vector<uint8_t> out(schema.sample_bytes());
  int zstd_records = 0;
  uint64_t previous_end = kShardHeaderBytes;
  for (uint64_t i = 0; i < kRecords; ++i) {
    const ShardIndexEntry e = r.entry(i);
    EXPECT_EQ(r.EntryProblem(e), "") << i;
    EXPECT_EQ(e.offset % kDefaultRecordAlignment, 0u) << "record " << i;
    EXPECT_EQ(e.offset, AlignUp(previous_end, kDefaultRecordAlignment)) << "record " << i;
    previous_end = e.offset + e.stored_size;
    EXPECT_EQ(e.codec, i % 2 == 0 ? Codec::kZstd : Codec::kNone) << i;
    zstd_records += e.codec == Codec::kZstd;
    EXPECT_EQ(r.key(e), KeyOf(i));
    int64_t label = 0;
    Status s = r.ReadRecord(i, &dec, out.data(), &label);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(label, static_cast<int64_t>(i) - 50);
    EXPECT_EQ(out, SampleBytes(schema.sample_bytes(), i)) << i;
  }
  EXPECT_EQ(zstd_records, 250);
  // Every gap between records is zero padding (section 3).
  for (uint64_t i = 0; i + 1 < kRecords; ++i) {
    const ShardIndexEntry a = r.entry(i), b = r.entry(i + 1);
    for (uint64_t p = a.offset + a.stored_size; p < b.offset; ++p) {
      ASSERT_EQ(bytes[p], 0) << "padding byte " << p;
    }
  }
}

// The open flags (fdinfo prints them in octal) of this process's open file whose path ends with
// `suffix`, read from /proc/self/fdinfo; -1 when no such file is open.
int OpenFileFlags(const std::string& suffix) {
  for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (ec || target.size() < suffix.size() ||
        target.compare(target.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    std::ifstream info("/proc/self/fdinfo/" + fd.path().filename().string());
    std::string key;
    while (info >> key) {
      if (key == "flags:") {
        std::string octal;
        info >> octal;
        return static_cast<int>(std::stoul(octal, nullptr, 8));
      }
    }
  }
  return -1;
}

// Shards span several 4 MiB write buffers and end in a tail that is not a multiple of 4 KiB:
// written with O_DIRECT where the filesystem takes it (the test's temporary directory, checked
// with a probe file) and through the page cache where it does not (/dev/shm on kernels whose
// tmpfs refuses O_DIRECT), the files are byte for byte the same and read back.
TEST(ShardWriterReaderTest, LargeShardIsTheSameWrittenDirectOrThroughThePageCache) {
  TempDir dir;
  const TensorSchema schema = Schema(224, 224, 3);  // 150,528-byte records
  RecordEncoder enc(*Compression::Parse("none"));
  constexpr uint64_t kRecords = 70;  // about 10.5 MB: two full buffers and a partial one
  std::vector<std::string> paths = {dir / "disk.kiln"};
  const std::string shm_dir = "/dev/shm/kiln-shard-writer-test-" + std::to_string(::getpid());
  if (fs::is_directory("/dev/shm") && fs::create_directory(shm_dir)) {
    paths.push_back(shm_dir + "/shm.kiln");
  }
  const std::string probe = dir / "probe";
  const int probe_fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  const bool disk_takes_direct = probe_fd >= 0;
  if (probe_fd >= 0) ::close(probe_fd);
  std::vector<std::vector<uint8_t>> files;
  for (const std::string& path : paths) {
    auto writer = ShardWriter::Create(path, Header(schema));
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    for (uint64_t i = 0; i < kRecords; ++i) {
      ASSERT_TRUE((*writer)->Add(Encode(&enc, schema, i)).ok()) << path << " record " << i;
    }
    if (path == paths[0]) {
      const int flags = OpenFileFlags("/disk.kiln.tmp");
      ASSERT_GE(flags, 0) << "the shard's temporary file is not open";
      EXPECT_EQ((flags & O_DIRECT) != 0, disk_takes_direct) << "flags " << flags;
    }
    auto info = (*writer)->Finish();
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    files.push_back(testing::ReadFileBytes(path));
    EXPECT_EQ(info->bytes, files.back().size()) << path;
    EXPECT_NE(files.back().size() % 4096, 0u) << "the tail should not be a whole 4 KiB block";
    EXPECT_GT(files.back().size(), uint64_t{8} << 20);
    EXPECT_EQ(info->xxh3_64, RecordChecksum(files.back().data(), files.back().size(), 0)) << path;
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    ASSERT_EQ((*reader)->record_count(), kRecords);
    RecordDecoder dec;
    std::vector<uint8_t> out(schema.sample_bytes());
    for (uint64_t i = 0; i < kRecords; ++i) {
      int64_t label = 0;
      ASSERT_TRUE((*reader)->ReadRecord(i, &dec, out.data(), &label).ok()) << path << " " << i;
      ASSERT_EQ(out, SampleBytes(schema.sample_bytes(), i)) << path << " record " << i;
    }
  }
  if (files.size() == 2) {
    EXPECT_TRUE(files[0] == files[1]);
  }
  std::error_code ec;
  fs::remove_all(shm_dir, ec);
}

TEST(ShardWriterReaderTest, EveryRecordAlignedForEveryAlignment) {
  TempDir dir;
  const TensorSchema schema = Schema(3, 5, 1);  // 15 bytes: never a multiple of the alignment
  RecordEncoder enc(Compression{});
  for (uint32_t alignment : {8u, 16u, 64u, 512u, 4096u}) {
    const std::string path = dir / ("a" + std::to_string(alignment) + ".kiln");
    auto writer = ShardWriter::Create(path, Header(schema, alignment));
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 9; ++i) ASSERT_TRUE((*writer)->Add(Encode(&enc, schema, i)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    EXPECT_EQ((*reader)->header().record_alignment, alignment);
    for (uint64_t i = 0; i < 9; ++i) {
      EXPECT_EQ((*reader)->entry(i).offset % alignment, 0u) << alignment << " record " << i;
      EXPECT_TRUE((*reader)->CheckRecord(i).ok());
    }
    EXPECT_EQ((*reader)->footer().index_offset % 8, 0u);
    EXPECT_EQ((*reader)->file_bytes() % 8, 0u);
  }
}

TEST(ShardWriterReaderTest, ProjectedBytesEqualsFinalSize) {
  TempDir dir;
  RecordEncoder enc(*Compression::Parse("zstd"));
  int n = 0;
  for (uint32_t alignment : {8u, 64u, 1024u}) {
    for (uint64_t records = 1; records <= 12; ++records) {
      const TensorSchema schema = Schema(4 + records, 7, 1);
      const std::string path = dir / ("p" + std::to_string(n++) + ".kiln");
      auto writer = ShardWriter::Create(path, Header(schema, alignment));
      ASSERT_TRUE(writer.ok());
      uint64_t projected = 0;
      for (uint64_t i = 0; i < records; ++i) {
        const EncodedRecord rec = Encode(&enc, schema, i);
        projected = (*writer)->ProjectedBytes(rec.stored.size(), rec.key.size());
        ASSERT_TRUE((*writer)->Add(rec).ok());
      }
      auto info = (*writer)->Finish();
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(projected, info->bytes) << "alignment " << alignment << ", " << records;
      EXPECT_EQ(fs::file_size(path), info->bytes);
    }
  }
}

TEST(ShardWriterReaderTest, EmptyShardIsValid) {
  TempDir dir;
  const std::string path = dir / "empty.kiln";
  auto writer = ShardWriter::Create(path, Header(Schema(2, 2, 1)));
  ASSERT_TRUE(writer.ok());
  auto info = (*writer)->Finish();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->bytes, kShardHeaderBytes + kShardFooterBytes);
  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ((*reader)->record_count(), 0u);
  EXPECT_TRUE((*reader)->VerifyIndexChecksum().ok());
}

// formats/shards/shard_format.md section 8, computed by hand there; this file must match.
TEST(ShardWriterReaderTest, SpecWorkedExample) {
  TempDir dir;
  const std::string path = dir / "example.kiln";
  const TensorSchema schema = Schema(2, 3, 1);
  auto writer = ShardWriter::Create(path, Header(schema));
  ASSERT_TRUE(writer.ok());
  RecordEncoder enc(Compression{});
  const uint8_t r0[6] = {0, 1, 2, 3, 4, 5};
  const uint8_t r1[6] = {10, 11, 12, 13, 14, 15};
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(r0, 6, 0, "a.png", &rec).ok());
  ASSERT_TRUE((*writer)->Add(rec).ok());
  ASSERT_TRUE(enc.Encode(r1, 6, 1, "b/c.png", &rec).ok());
  ASSERT_TRUE((*writer)->Add(rec).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  const std::vector<uint8_t> b = testing::ReadFileBytes(path);
  ASSERT_EQ(b.size(), 296u);
  EXPECT_EQ(std::memcmp(b.data() + 64, r0, 6), 0);
  for (size_t p = 70; p < 128; ++p) EXPECT_EQ(b[p], 0) << p;
  EXPECT_EQ(std::memcmp(b.data() + 128, r1, 6), 0);
  EXPECT_EQ(b[134], 0);
  EXPECT_EQ(b[135], 0);
  // Index entry 0 at 136, entry 1 at 176.
  EXPECT_EQ(LoadLE64(&b[136]), 64u);
  EXPECT_EQ(LoadLE32(&b[144]), 6u);
  EXPECT_EQ(LoadLE32(&b[148]), 6u);
  EXPECT_EQ(LoadLE64(&b[152]), 0u);
  EXPECT_EQ(LoadLE64(&b[160]), RecordChecksum(r0, 6, 0));
  EXPECT_EQ(LoadLE32(&b[168]), 0u);
  EXPECT_EQ(LoadLE16(&b[172]), 5u);
  EXPECT_EQ(LoadLE64(&b[176]), 128u);
  EXPECT_EQ(LoadLE64(&b[192]), 1u);
  EXPECT_EQ(LoadLE64(&b[200]), RecordChecksum(r1, 6, 1));
  EXPECT_EQ(LoadLE32(&b[208]), 5u);
  EXPECT_EQ(LoadLE16(&b[212]), 7u);
  // Keys at 216..227, padding 228..231, footer 232..295.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&b[216]), 12), "a.pngb/c.png");
  for (size_t p = 228; p < 232; ++p) EXPECT_EQ(b[p], 0) << p;
  EXPECT_EQ(LoadLE64(&b[232]), 136u);
  EXPECT_EQ(LoadLE64(&b[240]), 2u);
  EXPECT_EQ(LoadLE64(&b[248]), 216u);
  EXPECT_EQ(LoadLE64(&b[256]), 12u);
  EXPECT_EQ(LoadLE64(&b[264]), RecordChecksum(&b[136], 92, 0));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&b[288]), 8), "KILNSEND");
}

TEST(ShardWriterReaderTest, UnfinishedWriterLeavesNoFile) {
  TempDir dir;
  const std::string path = dir / "a.kiln";
  const TensorSchema schema = Schema(8, 8, 1);
  RecordEncoder enc(Compression{});
  {
    auto writer = ShardWriter::Create(path, Header(schema));
    ASSERT_TRUE(writer.ok());
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE((*writer)->Add(Encode(&enc, schema, i)).ok());
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(ShardWriterReaderTest, CreateTruncatesLeftoverTmp) {
  TempDir dir;
  const std::string path = dir / "a.kiln";
  testing::WriteFileBytes(path + ".tmp", std::vector<uint8_t>(100000, 0x77));
  auto writer = ShardWriter::Create(path, Header(Schema(2, 2, 1)));
  ASSERT_TRUE(writer.ok());
  auto info = (*writer)->Finish();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(fs::file_size(path), 128u);
  EXPECT_TRUE(ShardReader::Open(path).ok());
}

TEST(ShardWriterReaderTest, CreateErrors) {
  TempDir dir;
  auto bad_schema = ShardWriter::Create(dir / "a.kiln", Header(Schema(0, 2, 1)));
  ASSERT_FALSE(bad_schema.ok());
  EXPECT_EQ(bad_schema.status().code(), StatusCode::kInvalidArgument);
  auto no_dir = ShardWriter::Create(dir / "missing/a.kiln", Header(Schema(2, 2, 1)));
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.status().message().find(dir / "missing/a.kiln"), std::string::npos)
      << no_dir.status().message();
}

// shard_writer.h: Create returns "InvalidArgument for a bad header". A record alignment that is
// not a power of two in [8, 1 MiB] would produce a file every reader refuses (section 2).
TEST(ShardWriterReaderTest, CreateRejectsBadAlignment) {
  TempDir dir;
  for (uint32_t alignment : {0u, 3u, 4u, 100u, 1u << 21}) {
    auto writer = ShardWriter::Create(dir / "a.kiln", Header(Schema(2, 2, 1), alignment));
    ASSERT_FALSE(writer.ok()) << "alignment " << alignment;
    EXPECT_EQ(writer.status().code(), StatusCode::kInvalidArgument) << alignment;
  }
  EXPECT_FALSE(fs::exists(dir / "a.kiln.tmp"));
}

TEST(ShardWriterReaderTest, AddRejectsWrongSizeAndLongKey) {
  TempDir dir;
  const TensorSchema schema = Schema(2, 2, 1);
  auto writer = ShardWriter::Create(dir / "a.kiln", Header(schema));
  ASSERT_TRUE(writer.ok());
  RecordEncoder enc(Compression{});
  const uint8_t five[5] = {};
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(five, 5, 0, "k", &rec).ok());
  EXPECT_EQ((*writer)->Add(rec).code(), StatusCode::kInvalidArgument);
  const uint8_t four[4] = {};
  ASSERT_TRUE(enc.Encode(four, 4, 0, std::string(kMaxKeyBytes + 1, 'k'), &rec).ok());
  EXPECT_EQ((*writer)->Add(rec).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(enc.Encode(four, 4, 0, std::string(kMaxKeyBytes, 'k'), &rec).ok());
  EXPECT_TRUE((*writer)->Add(rec).ok());
  EXPECT_EQ((*writer)->record_count(), 1u);
  ASSERT_TRUE((*writer)->Finish().ok());
  auto reader = ShardReader::Open(dir / "a.kiln");
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->key((*reader)->entry(0)).size(), kMaxKeyBytes);
}

// Writes a 10-record shard of 4x4x1 uint8 samples and returns its path.
std::string WriteSmallShard(const TempDir& dir, const std::string& name = "s.kiln") {
  const std::string path = dir / name;
  const TensorSchema schema = Schema(4, 4, 1);
  auto writer = ShardWriter::Create(path, Header(schema));
  EXPECT_TRUE(writer.ok());
  RecordEncoder enc(Compression{});
  for (uint64_t i = 0; i < 10; ++i) EXPECT_TRUE((*writer)->Add(Encode(&enc, schema, i)).ok());
  EXPECT_TRUE((*writer)->Finish().ok());
  return path;
}

TEST(ShardWriterReaderTest, ReadRecordChecksumErrorNamesPathRecordAndOffset) {
  TempDir dir;
  const std::string path = WriteSmallShard(dir);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  uint64_t offset5 = 0;
  {
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok());
    offset5 = (*reader)->entry(5).offset;
  }
  bytes[offset5 + 3] ^= 0x10;
  testing::WriteFileBytes(path, bytes);
  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok());  // O(1) open does not look at records
  RecordDecoder dec;
  uint8_t out[16];
  int64_t label = 0;
  Status s = (*reader)->ReadRecord(5, &dec, out, &label);
  ASSERT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("record 5"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("offset " + std::to_string(offset5)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  // The same place in fields, and the reason without it.
  EXPECT_EQ(s.location(), (ErrorLocation{path, 5, static_cast<int64_t>(offset5)}));
  EXPECT_EQ(s.reason().rfind("checksum mismatch (stored ", 0), 0u) << s.reason();
  EXPECT_EQ(s.message(), (*reader)->RecordLocation(5, offset5) + ": " + std::string(s.reason()));
  EXPECT_EQ((*reader)->CheckRecord(5).code(), StatusCode::kCorruption);
  EXPECT_EQ((*reader)->CheckRecord(5).location(), s.location());
  EXPECT_TRUE((*reader)->ReadRecord(4, &dec, out, &label).ok());
  EXPECT_TRUE((*reader)->ReadRecord(6, &dec, out, &label).ok());
}

TEST(ShardWriterReaderTest, DamagedLabelIsCaughtByTheRecordChecksum) {
  TempDir dir;
  const std::string path = WriteSmallShard(dir);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  uint64_t entry_offset = 0;
  {
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok());
    entry_offset = (*reader)->EntryOffset(2);
  }
  bytes[entry_offset + 16] ^= 0x01;  // label
  testing::WriteFileBytes(path, bytes);
  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok());
  Status s = (*reader)->CheckRecord(2);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("record 2"), std::string::npos);
  EXPECT_EQ((*reader)->VerifyIndexChecksum().code(), StatusCode::kCorruption);
  EXPECT_NE((*reader)->VerifyIndexChecksum().message().find(path), std::string::npos);
}

TEST(ShardWriterReaderTest, BadIndexEntryErrorNamesEntryOffset) {
  TempDir dir;
  const std::string path = WriteSmallShard(dir);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  uint64_t entry_offset = 0;
  {
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok());
    entry_offset = (*reader)->EntryOffset(7);
  }
  struct Edit {
    size_t field;  // byte inside the entry
    uint8_t value;
    const char* expected;
  };
  const Edit edits[] = {
      {7, 0x40, "outside the data region"},  // offset far past the index
      {0, 0x01, "not aligned"},              // offset 1 byte off
      {8, 0x11, "uncompressed record of"},   // stored_size != raw_size
      {12, 0x11, "raw size"},                // raw_size != schema
      {38, 0x07, "unknown codec"},           // codec
      {35, 0x7F, "key outside"},             // key_offset
  };
  for (const Edit& edit : edits) {
    std::vector<uint8_t> damaged = bytes;
    if (edit.field == 0) {
      damaged[entry_offset] = static_cast<uint8_t>(damaged[entry_offset] + 1);
    } else {
      damaged[entry_offset + edit.field] = edit.value;
    }
    testing::WriteFileBytes(path, damaged);
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().ToString();
    RecordDecoder dec;
    uint8_t out[16];
    int64_t label = 0;
    Status s = (*reader)->ReadRecord(7, &dec, out, &label);
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << edit.expected;
    EXPECT_NE(s.message().find(path + " record 7 (offset " + std::to_string(entry_offset) + ")"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("bad index entry"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(edit.expected), std::string::npos) << s.message();
    EXPECT_EQ(s.location(), (ErrorLocation{path, 7, static_cast<int64_t>(entry_offset)}));
    EXPECT_EQ(s.reason().rfind("bad index entry: ", 0), 0u) << s.reason();
  }
}

TEST(ShardWriterReaderTest, ReadRecordOutOfRange) {
  TempDir dir;
  auto reader = ShardReader::Open(WriteSmallShard(dir));
  ASSERT_TRUE(reader.ok());
  RecordDecoder dec;
  uint8_t out[16];
  int64_t label = 0;
  EXPECT_EQ((*reader)->ReadRecord(10, &dec, out, &label).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*reader)->CheckRecord(~uint64_t{0}).code(), StatusCode::kOutOfRange);
}

TEST(ShardWriterReaderTest, OpenErrorsStartWithThePath) {
  TempDir dir;
  const std::string good = WriteSmallShard(dir);
  const std::vector<uint8_t> bytes = testing::ReadFileBytes(good);

  auto missing = ShardReader::Open(dir / "nope.kiln");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir / "nope.kiln"), std::string::npos);

  EXPECT_EQ(missing.status().location(), ErrorLocation{dir / "nope.kiln"});

  // `offset`: where Status::location() places the damage (the footer's start for the end).
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    StatusCode code;
    const char* expected;
    int64_t offset;
  };
  const auto footer_at = [](size_t size) { return static_cast<int64_t>(size - 64); };
  std::vector<Case> cases;
  cases.push_back({"empty.kiln", {}, StatusCode::kCorruption, "too small", 0});
  cases.push_back({"small.kiln", std::vector<uint8_t>(bytes.begin(), bytes.begin() + 127),
                   StatusCode::kCorruption, "too small", footer_at(127)});
  cases.push_back({"truncated.kiln", std::vector<uint8_t>(bytes.begin(), bytes.end() - 10),
                   StatusCode::kCorruption, "no footer magic", footer_at(bytes.size() - 10)});
  std::vector<uint8_t> magic = bytes;
  magic[1] = 'X';
  cases.push_back({"magic.kiln", magic, StatusCode::kCorruption, "bad magic", 0});
  std::vector<uint8_t> version = bytes;
  StoreLE16(&version[8], 2);
  StoreLE64(&version[56], RecordChecksum(version.data(), 56, 0));
  cases.push_back({"v2.kiln", version, StatusCode::kNotSupported, "unsupported", 0});
  std::vector<uint8_t> footer = bytes;
  footer[footer.size() - 64] ^= 0x08;  // index_offset
  cases.push_back({"footer.kiln", footer, StatusCode::kCorruption, "footer checksum mismatch",
                   footer_at(bytes.size())});
  std::vector<uint8_t> appended = bytes;
  appended.push_back(0);
  cases.push_back({"appended.kiln", appended, StatusCode::kCorruption, "no footer magic",
                   footer_at(bytes.size() + 1)});
  for (const Case& c : cases) {
    const std::string path = dir / c.name;
    testing::WriteFileBytes(path, c.bytes);
    auto r = ShardReader::Open(path);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), c.code) << c.name << ": " << r.status().ToString();
    EXPECT_EQ(r.status().message().rfind(path, 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().location(), (ErrorLocation{path, -1, c.offset})) << c.name;
    EXPECT_NE(r.status().reason().find(c.expected), std::string::npos) << c.name;
    EXPECT_NE(r.status().reason().rfind(path, 0), 0u) << "the reason leaves the path out";
  }
}

TEST(ShardWriterReaderTest, RecordLocationFormat) {
  TempDir dir;
  const std::string path = WriteSmallShard(dir);
  auto reader = ShardReader::Open(path);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->RecordLocation(3, 256), path + " record 3 (offset 256)");
  EXPECT_EQ((*reader)->EntryOffset(0), (*reader)->footer().index_offset);
  EXPECT_EQ((*reader)->EntryOffset(2), (*reader)->footer().index_offset + 80);
}

}  // namespace
}  // namespace kiln
