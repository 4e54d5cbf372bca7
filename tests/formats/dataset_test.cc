// Tests for formats/dataset.h and formats/shards/shard_dataset.h: Open's checks of every shard
// against the manifest (B27a: a truncated shard is named at open), sample lookup across shards,
// errors.
#include "formats/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/dataset_writer.h"
#include "formats/shards/shard_dataset.h"
#include "formats/shards/shard_set_writer.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

TensorSchema Schema() { return testing::MakeSchema(5, 5, 3); }

std::vector<uint8_t> Raw(uint64_t i) {
  std::vector<uint8_t> raw(Schema().sample_bytes());
  for (size_t j = 0; j < raw.size(); ++j) raw[j] = static_cast<uint8_t>(i * 7 + j / 3);
  return raw;
}

std::string KeyOf(uint64_t i) { return "k/" + std::to_string(i) + ".jpg"; }

// Writes `samples` samples into `dir`, split into shards of at most `shard_size` bytes.
void WriteDataset(const std::string& dir, uint64_t samples, uint64_t shard_size,
                  const char* compression = "zstd") {
  DatasetWriterOptions o;
  o.schema = Schema();
  o.shard_size_bytes = shard_size;
  Result<Compression> codec = Compression::Parse(compression);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  Result<Manifest> written = testing::WriteTestDataset(dir, o, *codec, samples, [](uint64_t i) {
    return testing::TestSample{Raw(i), static_cast<int64_t>(i) * 3 - 10, KeyOf(i)};
  });
  ASSERT_TRUE(written.ok()) << written.status().ToString();
}

void EditManifest(const std::string& dir, void (*edit)(Manifest*)) {
  Result<Manifest> m = Manifest::Read(dir);
  ASSERT_TRUE(m.ok());
  edit(&*m);
  ASSERT_TRUE(m->Write(dir).ok());
}

void Truncate(const std::string& path, uint64_t size) { fs::resize_file(path, size); }

TEST(DatasetTest, ReadsEverySampleAcrossShards) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->dir(), dir);
  EXPECT_EQ((*ds)->num_samples(), 60u);
  EXPECT_EQ((*ds)->schema(), Schema());
  const auto* shards = dynamic_cast<const ShardDataset*>(ds->get());
  ASSERT_NE(shards, nullptr);
  EXPECT_GE(shards->shard_count(), 3u);
  RecordDecoder dec;
  std::vector<uint8_t> out(Schema().sample_bytes());
  // Out of order, so the shard lookup is exercised in both directions.
  for (uint64_t n = 0; n < 60; ++n) {
    const uint64_t i = (n * 37) % 60;
    int64_t label = 0;
    Status s = (*ds)->ReadSample(i, &dec, out.data(), &label);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, Raw(i)) << i;
    EXPECT_EQ(label, static_cast<int64_t>(i) * 3 - 10);
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_TRUE(key.ok());
    EXPECT_EQ(*key, KeyOf(i));
  }
}

TEST(DatasetTest, OutOfRangeSample) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 5, 1 << 20);
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok());
  RecordDecoder dec;
  std::vector<uint8_t> out(Schema().sample_bytes());
  int64_t label = 0;
  Status s = (*ds)->ReadSample(5, &dec, out.data(), &label);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find(dir), std::string::npos);
  EXPECT_EQ((*ds)->Key(5).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*ds)->Key(~uint64_t{0}).status().code(), StatusCode::kOutOfRange);
}

// B27(a): a shard truncated to half before the reader opens it is detected at open, by size
// against the manifest, and the error names the shard.
TEST(DatasetTest, FieldCase_B27a_TruncatedShardNamedAtOpen) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  const std::string shard = dir + "/" + ShardFileName(1);
  const uint64_t half = fs::file_size(shard) / 2;
  Truncate(shard, half);
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(shard), std::string::npos) << ds.status().message();
  EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status().message();
  // In fields too: the shard, and the first byte missing.
  EXPECT_EQ(ds.status().location(), (ErrorLocation{shard, -1, static_cast<int64_t>(half)}));
  EXPECT_EQ(ds.status().reason().rfind("file is ", 0), 0u) << ds.status().reason();
}

TEST(DatasetTest, GrownShardIsCorruption) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 10, 1 << 20);
  const std::string shard = dir + "/" + ShardFileName(0);
  std::ofstream(shard, std::ios::app) << "extra";
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(shard), std::string::npos);
}

// A truncated shard whose manifest entry was "fixed" to the new size is still caught, by the
// footer check of ShardReader::Open.
TEST(DatasetTest, TruncatedShardWithMatchingManifestSizeIsCaughtByTheFooter) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 10, 1 << 20);
  const std::string shard = dir + "/" + ShardFileName(0);
  Truncate(shard, fs::file_size(shard) - 10);
  EditManifest(dir, [](Manifest* m) { m->files[0].bytes -= 10; });
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(shard), std::string::npos) << ds.status().message();
  EXPECT_NE(ds.status().message().find("truncated"), std::string::npos) << ds.status().message();
}

TEST(DatasetTest, SchemaMismatchNamesTheShard) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 10, 1 << 20);
  EditManifest(dir, [](Manifest* m) { m->schema.layout = Layout::kCHW; });
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(dir + "/" + ShardFileName(0)), std::string::npos);
  EXPECT_NE(ds.status().message().find("schema"), std::string::npos) << ds.status().message();
}

TEST(DatasetTest, MissingShardIsNotFoundNamingIt) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  const std::string shard = dir + "/" + ShardFileName(2);
  fs::remove(shard);
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find(shard), std::string::npos) << ds.status().message();
}

TEST(DatasetTest, TotalCountMismatchNamesTheManifest) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 10, 1 << 20);
  EditManifest(dir, [](Manifest* m) { m->samples = 11; });
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(dir + "/kiln.json"), std::string::npos);
  EXPECT_NE(ds.status().message().find("11"), std::string::npos);
}

TEST(DatasetTest, PerShardCountMismatchNamesTheShard) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  EditManifest(dir, [](Manifest* m) {
    m->files[0].samples += 1;
    m->files[1].samples -= 1;  // total unchanged
  });
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ds.status().message().find(dir + "/" + ShardFileName(0)), std::string::npos)
      << ds.status().message();
}

TEST(DatasetTest, ShardsInTheWrongOrderAreCorruption) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  EditManifest(dir, [](Manifest* m) { std::swap(m->files[0], m->files[1]); });
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
}

TEST(DatasetTest, DamagedHeaderNamesTheShard) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 10, 1 << 20);
  const std::string shard = dir + "/" + ShardFileName(0);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7f');
  }
  auto ds = Dataset::Open(dir);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ds.status().message().rfind(shard, 0), 0u) << ds.status().message();
  EXPECT_NE(ds.status().message().find("header checksum"), std::string::npos);
}

// A key has no checksum of its own (shard_format.md section 4); Key checks the index
// checksum once per shard, so a damaged key is an error naming shard and record, never returned.
// Samples of that shard still read (their records are intact), and other shards' keys too.
TEST(DatasetTest, DamagedKeyIsNeverReturned) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto& shards = dynamic_cast<const ShardDataset&>(**ds);
  ASSERT_GE(shards.shard_count(), 2u);
  const ShardReader& first = shards.shard(0);
  const ShardIndexEntry e = first.entry(1);
  const uint64_t at = first.footer().keys_offset + e.key_offset + 2;
  const uint64_t in_first = first.record_count();
  ds->reset();
  {
    std::fstream f(dir + "/shard-00000.kiln", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(f.get() ^ 0x01);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(c);
  }
  ds = Dataset::Open(dir);  // O(1) open does not hash the index
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  for (uint64_t i = 0; i < in_first; ++i) {
    Result<std::string> key = (*ds)->Key(i);
    ASSERT_FALSE(key.ok()) << "sample " << i << ": " << *key;
    EXPECT_EQ(key.status().code(), StatusCode::kCorruption);
    EXPECT_NE(key.status().message().find("shard-00000.kiln record " + std::to_string(i)),
              std::string::npos)
        << key.status().message();
    EXPECT_NE(key.status().message().find("index checksum mismatch"), std::string::npos)
        << key.status().message();
  }
  Result<std::string> other = (*ds)->Key(in_first);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(*other, KeyOf(in_first));
  RecordDecoder dec;
  std::vector<uint8_t> out(Schema().sample_bytes());
  int64_t label;
  ASSERT_TRUE((*ds)->ReadSample(1, &dec, out.data(), &label).ok());
  EXPECT_EQ(out, Raw(1));
}

// Two uncompressed packs of the same names whose sample 7 differs in its pixels: same shard
// sizes, shard indices and record counts (shard_format.md section 11).
void WriteTwinDatasets(const std::string& a, const std::string& b) {
  DatasetWriterOptions o;
  o.schema = Schema();
  o.shard_size_bytes = 2048;
  for (const std::string& dir : {a, b}) {
    const bool changed = dir == b;
    Result<Manifest> written = testing::WriteTestDataset(dir, o, {}, 60, [changed](uint64_t i) {
      std::vector<uint8_t> raw = Raw(i);
      if (changed && i == 7) raw = Raw(8);  // one image replaced by another, same size
      return testing::TestSample{raw, static_cast<int64_t>(i) * 3 - 10, KeyOf(i)};
    });
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }
}

TEST(DatasetTest, ManifestRecordsEveryShardsIndexChecksum) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 60, 2048);
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  const auto& shards = dynamic_cast<const ShardDataset&>(**ds);
  ASSERT_GE(shards.shard_count(), 3u);
  for (size_t s = 0; s < shards.shard_count(); ++s) {
    ASSERT_TRUE((*ds)->manifest().files[s].index_xxh3_64.has_value()) << s;
    EXPECT_EQ(*(*ds)->manifest().files[s].index_xxh3_64, shards.shard(s).footer().index_checksum);
  }
}

// The trial case: a shard of another pack with the same size and place (a stale copy) used to
// be served without an error; the manifest's index checksum refuses it at open, naming the
// shard and both checksums.
TEST(DatasetTest, ShardOfAnotherPackIsRefusedAtOpen) {
  TempDir tmp;
  const std::string a = tmp / "a", b = tmp / "b";
  WriteTwinDatasets(a, b);
  const std::string shard = b + "/" + ShardFileName(0);
  ASSERT_EQ(fs::file_size(a + "/" + ShardFileName(0)), fs::file_size(shard));
  ASSERT_TRUE(Dataset::Open(b).ok());
  const Result<Manifest> ma = Manifest::Read(a), mb = Manifest::Read(b);
  ASSERT_TRUE(ma.ok() && mb.ok());
  ASSERT_NE(*ma->files[0].index_xxh3_64, *mb->files[0].index_xxh3_64);
  fs::copy_file(a + "/" + ShardFileName(0), shard, fs::copy_options::overwrite_existing);
  auto ds = Dataset::Open(b);
  ASSERT_FALSE(ds.ok()) << "a shard of another pack was accepted";
  EXPECT_EQ(ds.status().code(), StatusCode::kCorruption);
  const std::string& msg = ds.status().message();
  EXPECT_EQ(msg.rfind(shard + " (offset ", 0), 0u) << msg;
  EXPECT_NE(msg.find("shard-00000.kiln belongs to another pack"), std::string::npos) << msg;
  EXPECT_NE(msg.find(FormatChecksum(*ma->files[0].index_xxh3_64)), std::string::npos) << msg;
  EXPECT_NE(msg.find(FormatChecksum(*mb->files[0].index_xxh3_64)), std::string::npos) << msg;
  EXPECT_NE(msg.find("files[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run kiln verify"), std::string::npos) << msg;
  const int64_t field = static_cast<int64_t>(fs::file_size(shard)) - 64 + 32;
  EXPECT_EQ(ds.status().location(), (ErrorLocation{shard, -1, field}));
}

// Manifests written before `index_xxh3_64` existed (and any without it) open as before, without
// the check: the trial's stale shard is then served (what the field exists to prevent).
TEST(DatasetTest, ManifestWithoutIndexChecksumsOpensUnchecked) {
  TempDir tmp;
  const std::string a = tmp / "a", b = tmp / "b";
  WriteTwinDatasets(a, b);
  EditManifest(b, [](Manifest* m) {
    for (DataFileInfo& f : m->files) f.index_xxh3_64.reset();
  });
  Result<std::string> text = ReadFileToString(b + "/kiln.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("index_xxh3_64"), std::string::npos);
  ASSERT_TRUE(Dataset::Open(b).ok());
  fs::copy_file(a + "/" + ShardFileName(0), b + "/" + ShardFileName(0),
                fs::copy_options::overwrite_existing);
  auto ds = Dataset::Open(b);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  RecordDecoder dec;
  std::vector<uint8_t> out(Schema().sample_bytes());
  int64_t label;
  ASSERT_TRUE((*ds)->ReadSample(7, &dec, out.data(), &label).ok());
  EXPECT_EQ(out, Raw(7));  // a's pixels, not b's
}

TEST(DatasetTest, NotADataset) {
  TempDir tmp;
  auto none = Dataset::Open(tmp / "nope");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  fs::create_directories(tmp / "empty");
  auto empty = Dataset::Open(tmp / "empty");
  EXPECT_EQ(empty.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find("kiln.json"), std::string::npos);
}

TEST(DatasetTest, UnknownStorageFormatIsNotSupported) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 3, 1 << 20);
  EditManifest(dir, [](Manifest* m) { m->format = "tape"; });
  auto ds = Dataset::Open(dir);
  EXPECT_EQ(ds.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(ds.status().message().find("tape"), std::string::npos);
}

}  // namespace
}  // namespace kiln
