// Tests for formats/shards/shard_format.h: the byte layout of header, index entry and footer, round
// trips, and every decode error (formats/shards/shard_format.md sections 2, 4, 5 and 6).
#include "formats/shards/shard_format.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

// XXH3-64 with seed 0 equals XXH3_64bits(), so RecordChecksum(p, n, 0) re-checksums structures.
uint64_t Xxh3(const uint8_t* p, size_t n) { return RecordChecksum(p, n, 0); }

ShardHeader SampleHeader() {
  ShardHeader h;
  h.record_alignment = 128;
  h.schema.dtype = DType::kFloat32;
  h.schema.layout = Layout::kCHW;
  h.schema.height = 480;
  h.schema.width = 640;
  h.schema.channels = 3;
  h.shard_index = 0x01020304;
  h.first_sample = 0x1122334455667788ull;
  return h;
}

// Re-checksums a header after a test changed bytes in [0, 56).
void ResealHeader(uint8_t* bytes) { StoreLE64(bytes + 56, Xxh3(bytes, 56)); }
void ResealFooter(uint8_t* bytes) { StoreLE64(bytes + 48, Xxh3(bytes, 48)); }

TEST(ShardFormatTest, ConstantsMatchTheSpec) {
  EXPECT_EQ(std::string(kShardMagic, 8), "KILNSHRD");
  EXPECT_EQ(std::string(kShardFooterMagic, 8), "KILNSEND");
  EXPECT_EQ(kShardVersionMajor, 1);
  EXPECT_EQ(kShardVersionMinor, 0);
  EXPECT_EQ(kShardHeaderBytes, 64u);
  EXPECT_EQ(kShardIndexEntryBytes, 40u);
  EXPECT_EQ(kShardFooterBytes, 64u);
  EXPECT_EQ(kDefaultRecordAlignment, 64u);
  EXPECT_EQ(static_cast<int>(Codec::kNone), 0);
  EXPECT_EQ(static_cast<int>(Codec::kZstd), 1);
  EXPECT_EQ(CodecName(Codec::kNone), "none");
  EXPECT_EQ(CodecName(Codec::kZstd), "zstd");
  EXPECT_EQ(CodecName(static_cast<Codec>(9)), "invalid");
}

TEST(ShardFormatTest, LittleEndianHelpers) {
  uint8_t b[8];
  StoreLE16(b, 0xBEEF);
  EXPECT_EQ(b[0], 0xEF);
  EXPECT_EQ(b[1], 0xBE);
  EXPECT_EQ(LoadLE16(b), 0xBEEF);
  StoreLE32(b, 0x01020304u);
  EXPECT_EQ(b[0], 0x04);
  EXPECT_EQ(b[3], 0x01);
  EXPECT_EQ(LoadLE32(b), 0x01020304u);
  StoreLE64(b, 0x0102030405060708ull);
  EXPECT_EQ(b[0], 0x08);
  EXPECT_EQ(b[7], 0x01);
  EXPECT_EQ(LoadLE64(b), 0x0102030405060708ull);
  EXPECT_EQ(AlignUp(0, 64), 0u);
  EXPECT_EQ(AlignUp(1, 64), 64u);
  EXPECT_EQ(AlignUp(64, 64), 64u);
  EXPECT_EQ(AlignUp(65, 8), 72u);
}

TEST(ShardFormatTest, HeaderBytesFollowSection2) {
  uint8_t b[kShardHeaderBytes];
  std::memset(b, 0xAA, sizeof(b));
  const ShardHeader h = SampleHeader();
  EncodeShardHeader(h, b);
  EXPECT_EQ(std::memcmp(b, "KILNSHRD", 8), 0);
  EXPECT_EQ(LoadLE16(b + 8), 1);
  EXPECT_EQ(LoadLE16(b + 10), 0);
  EXPECT_EQ(LoadLE32(b + 12), 0u);
  EXPECT_EQ(LoadLE32(b + 16), 64u);
  EXPECT_EQ(LoadLE32(b + 20), 128u);
  EXPECT_EQ(b[24], 3);  // float32
  EXPECT_EQ(b[25], 2);  // chw
  EXPECT_EQ(LoadLE16(b + 26), 3);
  EXPECT_EQ(LoadLE32(b + 28), 480u);
  EXPECT_EQ(LoadLE32(b + 32), 640u);
  EXPECT_EQ(LoadLE32(b + 36), 0x01020304u);
  EXPECT_EQ(LoadLE64(b + 40), 0x1122334455667788ull);
  for (int i = 48; i < 56; ++i) EXPECT_EQ(b[i], 0) << "reserved byte " << i;
  EXPECT_EQ(LoadLE64(b + 56), Xxh3(b, 56));
}

TEST(ShardFormatTest, HeaderRoundTrip) {
  uint8_t b[kShardHeaderBytes];
  const ShardHeader h = SampleHeader();
  EncodeShardHeader(h, b);
  Result<ShardHeader> d = DecodeShardHeader(b);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->record_alignment, h.record_alignment);
  EXPECT_EQ(d->schema, h.schema);
  EXPECT_EQ(d->shard_index, h.shard_index);
  EXPECT_EQ(d->first_sample, h.first_sample);
}

TEST(ShardFormatTest, HeaderBadMagic) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  b[0] = 'X';
  ResealHeader(b);
  Result<ShardHeader> d = DecodeShardHeader(b);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(d.status().message().rfind("bad magic", 0), 0u) << d.status().message();
}

TEST(ShardFormatTest, HeaderMajorVersion2IsNotSupported) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  StoreLE16(b + 8, 2);
  ResealHeader(b);
  Result<ShardHeader> d = DecodeShardHeader(b);
  ASSERT_FALSE(d.ok());
  // shard_format.h's comment lists this under Corruption, but shard_reader.h and status.h
  // classify a newer version as NotSupported, which is what the code returns.
  EXPECT_EQ(d.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(d.status().message().find("unsupported"), std::string::npos);
  EXPECT_NE(d.status().message().find("2.0"), std::string::npos) << d.status().message();
  // Major version 0 is refused the same way.
  StoreLE16(b + 8, 0);
  ResealHeader(b);
  EXPECT_FALSE(DecodeShardHeader(b).ok());
}

TEST(ShardFormatTest, HeaderNewerMinorVersionIsAccepted) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  StoreLE16(b + 10, 7);  // section 6: minor versions only add meaning to reserved fields
  ResealHeader(b);
  EXPECT_TRUE(DecodeShardHeader(b).ok());
}

TEST(ShardFormatTest, HeaderChecksumMismatch) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  b[30] ^= 0x01;  // height, without re-sealing
  Result<ShardHeader> d = DecodeShardHeader(b);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(d.status().message().rfind("header checksum mismatch", 0), 0u);
  // A damaged stored checksum is caught the same way.
  EncodeShardHeader(SampleHeader(), b);
  b[60] ^= 0x80;
  EXPECT_EQ(DecodeShardHeader(b).status().code(), StatusCode::kCorruption);
  // So is a damaged reserved byte.
  EncodeShardHeader(SampleHeader(), b);
  b[50] = 1;
  EXPECT_EQ(DecodeShardHeader(b).status().code(), StatusCode::kCorruption);
}

TEST(ShardFormatTest, HeaderNonzeroFlags) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  StoreLE32(b + 12, 1u << 31);
  ResealHeader(b);
  Result<ShardHeader> d = DecodeShardHeader(b);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_NE(d.status().message().find("nonzero"), std::string::npos);
  EXPECT_NE(d.status().message().find("flags"), std::string::npos);
}

TEST(ShardFormatTest, HeaderBadHeaderSize) {
  uint8_t b[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), b);
  StoreLE32(b + 16, 128);
  ResealHeader(b);
  EXPECT_EQ(DecodeShardHeader(b).status().code(), StatusCode::kCorruption);
}

TEST(ShardFormatTest, HeaderBadAlignment) {
  for (uint32_t a : {0u, 1u, 4u, 48u, 100u, (1u << 20) + 64, 1u << 21, 0xFFFFFFFFu}) {
    uint8_t b[kShardHeaderBytes];
    EncodeShardHeader(SampleHeader(), b);
    StoreLE32(b + 20, a);
    ResealHeader(b);
    Result<ShardHeader> d = DecodeShardHeader(b);
    ASSERT_FALSE(d.ok()) << a;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << a;
    EXPECT_NE(d.status().message().find("alignment"), std::string::npos) << a;
  }
  for (uint32_t a : {8u, 64u, 4096u, 1u << 20}) {
    uint8_t b[kShardHeaderBytes];
    ShardHeader h = SampleHeader();
    h.record_alignment = a;
    EncodeShardHeader(h, b);
    EXPECT_TRUE(DecodeShardHeader(b).ok()) << a;
  }
}

TEST(ShardFormatTest, HeaderInvalidSchema) {
  const std::pair<size_t, uint8_t> edits[] = {{24, 0}, {24, 4}, {25, 3}, {26, 2}, {28, 0}};
  for (const auto& [pos, value] : edits) {
    uint8_t b[kShardHeaderBytes];
    EncodeShardHeader(SampleHeader(), b);
    if (pos == 28) {
      StoreLE32(b + 28, 0);
    } else if (pos == 26) {
      StoreLE16(b + 26, value);
    } else {
      b[pos] = value;
    }
    ResealHeader(b);
    Result<ShardHeader> d = DecodeShardHeader(b);
    ASSERT_FALSE(d.ok()) << pos;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << pos;
    EXPECT_EQ(d.status().message().rfind("invalid schema: ", 0), 0u) << d.status().message();
  }
}

TEST(ShardFormatTest, IndexEntryBytesAndRoundTrip) {
  ShardIndexEntry e;
  e.offset = 0x0102030405060708ull;
  e.stored_size = 0x11121314u;
  e.raw_size = 0x21222324u;
  e.label = -2;
  e.checksum = 0xA1A2A3A4A5A6A7A8ull;
  e.key_offset = 0x31323334u;
  e.key_size = 0x4142;
  e.codec = Codec::kZstd;
  uint8_t b[kShardIndexEntryBytes];
  std::memset(b, 0xCC, sizeof(b));
  EncodeShardIndexEntry(e, b);
  EXPECT_EQ(LoadLE64(b + 0), e.offset);
  EXPECT_EQ(LoadLE32(b + 8), e.stored_size);
  EXPECT_EQ(LoadLE32(b + 12), e.raw_size);
  EXPECT_EQ(LoadLE64(b + 16), 0xFFFFFFFFFFFFFFFEull);  // two's complement
  EXPECT_EQ(LoadLE64(b + 24), e.checksum);
  EXPECT_EQ(LoadLE32(b + 32), e.key_offset);
  EXPECT_EQ(LoadLE16(b + 36), e.key_size);
  EXPECT_EQ(b[38], 1);
  EXPECT_EQ(b[39], 0);
  const ShardIndexEntry d = DecodeShardIndexEntry(b);
  EXPECT_EQ(d.offset, e.offset);
  EXPECT_EQ(d.stored_size, e.stored_size);
  EXPECT_EQ(d.raw_size, e.raw_size);
  EXPECT_EQ(d.label, e.label);
  EXPECT_EQ(d.checksum, e.checksum);
  EXPECT_EQ(d.key_offset, e.key_offset);
  EXPECT_EQ(d.key_size, e.key_size);
  EXPECT_EQ(d.codec, e.codec);
  // Labels at the int64 extremes survive.
  for (int64_t label : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    e.label = label;
    EncodeShardIndexEntry(e, b);
    EXPECT_EQ(DecodeShardIndexEntry(b).label, label);
  }
}

// A consistent footer for a file of `file_size` bytes with `records` records and `keys` bytes
// of keys right before the footer.
ShardFooter FooterFor(uint64_t file_size, uint64_t records, uint64_t keys) {
  ShardFooter f;
  f.keys_size = keys;
  const uint64_t keys_end = file_size - kShardFooterBytes;
  f.keys_offset = keys_end - keys;
  f.index_offset = f.keys_offset - records * kShardIndexEntryBytes;
  f.record_count = records;
  f.index_checksum = 0x5555;
  return f;
}

TEST(ShardFormatTest, FooterBytesAndRoundTrip) {
  ShardFooter f = FooterFor(1024, 10, 96);
  uint8_t b[kShardFooterBytes];
  std::memset(b, 0xCC, sizeof(b));
  EncodeShardFooter(f, b);
  EXPECT_EQ(LoadLE64(b + 0), f.index_offset);
  EXPECT_EQ(LoadLE64(b + 8), 10u);
  EXPECT_EQ(LoadLE64(b + 16), f.keys_offset);
  EXPECT_EQ(LoadLE64(b + 24), 96u);
  EXPECT_EQ(LoadLE64(b + 32), 0x5555u);
  for (int i = 40; i < 48; ++i) EXPECT_EQ(b[i], 0) << "reserved byte " << i;
  EXPECT_EQ(LoadLE64(b + 48), Xxh3(b, 48));
  EXPECT_EQ(std::memcmp(b + 56, "KILNSEND", 8), 0);
  Result<ShardFooter> d = DecodeShardFooter(b, 1024);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->index_offset, f.index_offset);
  EXPECT_EQ(d->record_count, f.record_count);
  EXPECT_EQ(d->keys_offset, f.keys_offset);
  EXPECT_EQ(d->keys_size, f.keys_size);
  EXPECT_EQ(d->index_checksum, f.index_checksum);
}

TEST(ShardFormatTest, FooterAcceptsUpTo7PaddingBytesAndAnEmptyShard) {
  uint8_t b[kShardFooterBytes];
  ShardFooter f = FooterFor(1024, 10, 96);
  f.keys_size -= 7;  // 7 bytes of padding between keys and footer
  EncodeShardFooter(f, b);
  EXPECT_TRUE(DecodeShardFooter(b, 1024).ok());
  f.keys_size -= 1;  // 8 bytes of padding: not what a writer produces
  EncodeShardFooter(f, b);
  EXPECT_EQ(DecodeShardFooter(b, 1024).status().code(), StatusCode::kCorruption);
  // Zero records, zero keys: header immediately followed by the footer.
  ShardFooter empty;
  empty.index_offset = 64;
  empty.keys_offset = 64;
  EncodeShardFooter(empty, b);
  EXPECT_TRUE(DecodeShardFooter(b, 128).ok());
}

// Section 6: reserved bytes are written as zero and ignored by 1.x readers (a later minor
// version may give them meaning); only the flags word must be zero.
TEST(ShardFormatTest, ReservedBytesAreIgnoredWhenResealed) {
  uint8_t h[kShardHeaderBytes];
  EncodeShardHeader(SampleHeader(), h);
  h[48] = 0x5A;
  h[55] = 0xA5;
  ResealHeader(h);
  EXPECT_TRUE(DecodeShardHeader(h).ok());
  uint8_t f[kShardFooterBytes];
  EncodeShardFooter(FooterFor(1024, 10, 96), f);
  f[40] = 0x5A;
  f[47] = 0xA5;
  ResealFooter(f);
  EXPECT_TRUE(DecodeShardFooter(f, 1024).ok());
  uint8_t e[kShardIndexEntryBytes];
  EncodeShardIndexEntry(ShardIndexEntry{}, e);
  e[39] = 0xFF;
  EXPECT_EQ(DecodeShardIndexEntry(e).codec, Codec::kNone);
}

TEST(ShardFormatTest, FooterNoMagic) {
  uint8_t b[kShardFooterBytes];
  EncodeShardFooter(FooterFor(1024, 10, 96), b);
  b[63] = 'X';
  Result<ShardFooter> d = DecodeShardFooter(b, 1024);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_NE(d.status().message().find("no footer magic"), std::string::npos);
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos);
}

TEST(ShardFormatTest, FooterChecksumMismatch) {
  uint8_t b[kShardFooterBytes];
  EncodeShardFooter(FooterFor(1024, 10, 96), b);
  b[8] ^= 0x04;  // record count
  Result<ShardFooter> d = DecodeShardFooter(b, 1024);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(d.status().message().rfind("footer checksum mismatch", 0), 0u);
  EncodeShardFooter(FooterFor(1024, 10, 96), b);
  b[44] = 1;  // reserved
  EXPECT_EQ(DecodeShardFooter(b, 1024).status().code(), StatusCode::kCorruption);
}

TEST(ShardFormatTest, FooterBoundsRejectEveryInconsistency) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const ShardFooter good = FooterFor(1024, 10, 96);
  struct Case {
    const char* what;
    ShardFooter f;
    uint64_t file_size;
  };
  std::vector<Case> cases;
  auto with = [&](const char* what, auto edit, uint64_t file_size = 1024) {
    ShardFooter f = good;
    edit(f);
    cases.push_back({what, f, file_size});
  };
  with(
      "file smaller than header + footer", [](ShardFooter&) {}, 127);
  with(
      "file size 0", [](ShardFooter&) {}, 0);
  with(
      "file size 64", [](ShardFooter&) {}, 64);
  with("index inside header", [](ShardFooter& f) {
    f.index_offset = 56;
    f.keys_offset = 56 + f.record_count * 40;
  });
  with("index not 8-aligned", [](ShardFooter& f) {
    f.index_offset += 4;
    f.keys_offset += 4;
    f.keys_size -= 4;
  });
  with("index past footer", [](ShardFooter& f) { f.index_offset = 1024; });
  with("index at UINT64_MAX-7", [](ShardFooter& f) { f.index_offset = kMax - 7; });
  with("record count UINT64_MAX", [](ShardFooter& f) { f.record_count = kMax; });
  with("record count whose byte size overflows", [](ShardFooter& f) {
    f.record_count = 10 + (kMax / 40 + 1);  // 40 * count wraps modulo 2^64
  });
  with("record count one too many", [](ShardFooter& f) { f.record_count += 1; });
  with("keys offset not after index", [](ShardFooter& f) { f.keys_offset -= 8; });
  with("keys offset UINT64_MAX", [](ShardFooter& f) { f.keys_offset = kMax; });
  with("keys size UINT64_MAX", [](ShardFooter& f) { f.keys_size = kMax; });
  with("keys size runs into footer", [](ShardFooter& f) { f.keys_size += 1; });
  with("keys size near UINT64_MAX - keys_offset", [](ShardFooter& f) {
    f.keys_size = kMax - f.keys_offset + 1;  // keys_offset + keys_size wraps to 0
  });
  with("gap of 8+ bytes before the footer", [](ShardFooter& f) { f.keys_size = 0; });
  with(
      "file size UINT64_MAX", [](ShardFooter&) {}, kMax);
  for (const Case& c : cases) {
    uint8_t b[kShardFooterBytes];
    EncodeShardFooter(c.f, b);
    Result<ShardFooter> d = DecodeShardFooter(b, c.file_size);
    ASSERT_FALSE(d.ok()) << c.what;
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << c.what;
    EXPECT_NE(d.status().message().find("out of bounds"), std::string::npos)
        << c.what << ": " << d.status().message();
  }
}

TEST(ShardFormatTest, RecordChecksumIsSeededWithTheLabel) {
  const uint8_t data[6] = {1, 2, 3, 4, 5, 6};
  const uint64_t a = RecordChecksum(data, 6, 0);
  EXPECT_EQ(a, RecordChecksum(data, 6, 0));
  EXPECT_NE(a, RecordChecksum(data, 6, 1));
  EXPECT_NE(RecordChecksum(data, 6, -1), RecordChecksum(data, 6, 1));
  uint8_t flipped[6] = {1, 2, 3, 4, 5, 7};
  EXPECT_NE(a, RecordChecksum(flipped, 6, 0));
  // Known value: XXH3-64 of the empty input with seed 0 (xxHash 0.8 test vector).
  EXPECT_EQ(RecordChecksum(nullptr, 0, 0), 0x2D06800538D394C2ull);
}

}  // namespace
}  // namespace kiln
