// Tests for formats/shard_renumbering.h: the planned hashes equal what the file hashes to before
// and after, renumbering changes the two header fields and nothing else, is idempotent, and
// refuses files that are not shards.
#include "formats/shards/shard_renumbering.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/shards/shard_reader.h"
#include "formats/shards/shard_writer.h"
#include "formats/xxh3.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

uint64_t HashOf(const std::string& path) {
  const std::vector<uint8_t> bytes = testing::ReadFileBytes(path);
  return Xxh3(bytes.data(), bytes.size());
}

// Writes a shard of `records` 3x300 uint8 samples (so the file spans more than one 1 MiB read
// when `records` is large), compressed when `zstd`.
DataFileInfo WriteShard(const std::string& path, uint32_t records, bool zstd) {
  ShardHeader header;
  header.schema.height = 3;
  header.schema.width = 300;
  header.schema.channels = 1;
  header.shard_index = 5;
  header.first_sample = 250;
  auto writer = ShardWriter::Create(path, header);
  EXPECT_TRUE(writer.ok());
  Compression c;
  if (zstd) c.codec = Codec::kZstd;
  RecordEncoder encoder(c);
  std::vector<uint8_t> raw(900);
  EncodedRecord record;
  for (uint32_t i = 0; i < records; ++i) {
    for (size_t j = 0; j < raw.size(); ++j)
      raw[j] = static_cast<uint8_t>((i * 7 + j * (i % 3)) % 251);
    EXPECT_TRUE(
        encoder.Encode(raw.data(), raw.size(), i % 4, "k/" + std::to_string(i), &record).ok());
    EXPECT_TRUE((*writer)->Add(record).ok());
  }
  auto info = (*writer)->Finish();
  EXPECT_TRUE(info.ok());
  return *info;
}

TEST(ShardRenumberingTest, PlanPredictsBothHashesAndRenumberChangesOnlyTheHeaderFields) {
  TempDir dir;
  for (uint32_t records : {1u, 1300u}) {
    const std::string path = dir.path() + "/s" + std::to_string(records) + ".kiln";
    const DataFileInfo info = WriteShard(path, records, records > 1);
    const std::vector<uint8_t> before = testing::ReadFileBytes(path);
    Result<ShardRenumberingPlan> plan = PlanShardRenumbering(path, 9, 123456789012ull);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    EXPECT_EQ(plan->bytes, info.bytes);
    EXPECT_EQ(plan->current_xxh3_64, info.xxh3_64);
    EXPECT_EQ(plan->current.shard_index, 5u);
    EXPECT_EQ(plan->current.first_sample, 250u);
    EXPECT_EQ(plan->renumbered.shard_index, 9u);
    EXPECT_EQ(plan->renumbered.first_sample, 123456789012ull);
    EXPECT_NE(plan->renumbered_xxh3_64, plan->current_xxh3_64);

    ASSERT_TRUE(RenumberShard(path, 9, 123456789012ull).ok());
    const std::vector<uint8_t> after = testing::ReadFileBytes(path);
    ASSERT_EQ(after.size(), before.size());
    EXPECT_EQ(HashOf(path), plan->renumbered_xxh3_64);
    // Bytes 36..47 (shard_index, first_sample) and 56..63 (header checksum) changed; the rest not.
    for (size_t i = 0; i < after.size(); ++i) {
      const bool field = (i >= 36 && i < 48) || (i >= 56 && i < 64);
      if (!field) {
        ASSERT_EQ(after[i], before[i]) << "byte " << i;
      }
    }
    Result<ShardHeader> h = DecodeShardHeader(after.data());
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->shard_index, 9u);
    EXPECT_EQ(h->first_sample, 123456789012ull);
    // The shard still opens and every record still checks.
    auto reader = ShardReader::Open(path);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    EXPECT_EQ((*reader)->record_count(), records);

    // Idempotent: again gives the same bytes; back to the old numbers gives the old file.
    ASSERT_TRUE(RenumberShard(path, 9, 123456789012ull).ok());
    EXPECT_EQ(testing::ReadFileBytes(path), after);
    ASSERT_TRUE(RenumberShard(path, 5, 250).ok());
    EXPECT_EQ(testing::ReadFileBytes(path), before);
  }
}

TEST(ShardRenumberingTest, RefusesWhatIsNotAShard) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing.kiln";
  EXPECT_EQ(PlanShardRenumbering(missing, 0, 0).status().code(), StatusCode::kNotFound);
  EXPECT_NE(PlanShardRenumbering(missing, 0, 0).status().message().find(missing),
            std::string::npos);
  EXPECT_FALSE(RenumberShard(missing, 0, 0).ok());

  const std::string junk = dir.path() + "/junk.kiln";
  {
    std::ofstream out(junk, std::ios::binary);
    out << std::string(4096, 'x');
  }
  Result<ShardRenumberingPlan> plan = PlanShardRenumbering(junk, 0, 0);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kCorruption);
  EXPECT_NE(plan.status().message().find("bad magic"), std::string::npos)
      << plan.status().message();
  EXPECT_FALSE(RenumberShard(junk, 0, 0).ok());
  EXPECT_EQ(testing::ReadFileBytes(junk), std::vector<uint8_t>(4096, 'x'));  // never written to

  const std::string tiny = dir.path() + "/tiny.kiln";
  {
    std::ofstream out(tiny, std::ios::binary);
    out << "KILNSHRD";
  }
  EXPECT_NE(PlanShardRenumbering(tiny, 0, 0).status().message().find("too short"),
            std::string::npos);

  // A flipped header byte: the header checksum catches it, so nothing is rewritten.
  const std::string shard = dir.path() + "/flipped.kiln";
  WriteShard(shard, 3, false);
  std::vector<uint8_t> bytes = testing::ReadFileBytes(shard);
  bytes[40] ^= 1;
  {
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  EXPECT_NE(PlanShardRenumbering(shard, 0, 0).status().message().find("header checksum mismatch"),
            std::string::npos);
  EXPECT_FALSE(RenumberShard(shard, 0, 0).ok());
  EXPECT_EQ(testing::ReadFileBytes(shard), bytes);
}

}  // namespace
}  // namespace kiln
