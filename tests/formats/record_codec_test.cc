// Tests for formats/record_codec.h: compression option parsing, encoding (raw fallback for
// incompressible data), zstd round trips and corrupt frames.
#include "formats/record_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace kiln {
namespace {

std::vector<uint8_t> Compressible(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i / 16) % 7);
  return v;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(CompressionTest, ParsesNoneZstdAndLevels) {
  Result<Compression> none = Compression::Parse("none");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->codec, Codec::kNone);
  EXPECT_EQ(none->ToString(), "none");

  Result<Compression> zstd = Compression::Parse("zstd");
  ASSERT_TRUE(zstd.ok());
  EXPECT_EQ(zstd->codec, Codec::kZstd);
  EXPECT_EQ(zstd->level, 3);
  EXPECT_EQ(zstd->ToString(), "zstd:3");

  Result<Compression> z19 = Compression::Parse("zstd:19");
  ASSERT_TRUE(z19.ok());
  EXPECT_EQ(z19->codec, Codec::kZstd);
  EXPECT_EQ(z19->level, 19);
  EXPECT_EQ(z19->ToString(), "zstd:19");

  Result<Compression> fast = Compression::Parse("zstd:-5");
  ASSERT_TRUE(fast.ok());
  EXPECT_EQ(fast->level, -5);
}

TEST(CompressionTest, RejectsBadText) {
  for (const char* bad : {"", "zst", "zstdx", "zstd:", "zstd:abc", "zstd:3x", "zstd:1000",
                          "zstd:99999999999999999999", "gzip", "None", "zstd-3", "lz4"}) {
    Result<Compression> c = Compression::Parse(bad);
    ASSERT_FALSE(c.ok()) << "'" << bad << "'";
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(c.status().message().empty());
  }
  EXPECT_NE(Compression::Parse("gzip").status().message().find("gzip"), std::string::npos);
  EXPECT_NE(Compression::Parse("zstd:abc").status().message().find("abc"), std::string::npos);
}

TEST(RecordCodecTest, NoneStoresVerbatim) {
  const std::vector<uint8_t> raw = Random(300, 1);
  RecordEncoder enc(Compression{});
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(raw.data(), raw.size(), -7, "a/b.png", &rec).ok());
  EXPECT_EQ(rec.codec, Codec::kNone);
  EXPECT_EQ(rec.stored, raw);
  EXPECT_EQ(rec.raw_size, 300u);
  EXPECT_EQ(rec.label, -7);
  EXPECT_EQ(rec.key, "a/b.png");
  EXPECT_EQ(rec.checksum, RecordChecksum(raw.data(), raw.size(), -7));
  RecordDecoder dec;
  std::vector<uint8_t> out(raw.size());
  ASSERT_TRUE(
      dec.Decode(rec.stored.data(), rec.stored.size(), rec.codec, out.data(), out.size()).ok());
  EXPECT_EQ(out, raw);
}

TEST(RecordCodecTest, IncompressibleDataIsStoredRaw) {
  const std::vector<uint8_t> raw = Random(4096, 2);
  RecordEncoder enc(*Compression::Parse("zstd:19"));
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(raw.data(), raw.size(), 3, "k", &rec).ok());
  EXPECT_EQ(rec.codec, Codec::kNone);
  EXPECT_EQ(rec.stored, raw);
  EXPECT_EQ(rec.checksum, RecordChecksum(raw.data(), raw.size(), 3));
  // Tiny samples never gain from a frame either.
  const uint8_t tiny[6] = {0, 0, 0, 0, 0, 0};
  ASSERT_TRUE(enc.Encode(tiny, 6, 0, "t", &rec).ok());
  EXPECT_EQ(rec.codec, Codec::kNone);
  EXPECT_EQ(rec.stored.size(), 6u);
}

TEST(RecordCodecTest, ZstdRoundTrip) {
  const std::vector<uint8_t> raw = Compressible(64 * 1024);
  RecordEncoder enc(*Compression::Parse("zstd"));
  RecordDecoder dec;
  EncodedRecord rec;
  for (int round = 0; round < 3; ++round) {  // contexts are reused across records
    ASSERT_TRUE(enc.Encode(raw.data(), raw.size(), round, "key", &rec).ok());
    EXPECT_EQ(rec.codec, Codec::kZstd);
    EXPECT_LT(rec.stored.size(), raw.size() / 10);
    EXPECT_EQ(rec.raw_size, raw.size());
    EXPECT_EQ(rec.checksum, RecordChecksum(rec.stored.data(), rec.stored.size(), round));
    std::vector<uint8_t> out(raw.size(), 0xEE);
    Status s = dec.Decode(rec.stored.data(), rec.stored.size(), rec.codec, out.data(), out.size());
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out, raw);
  }
}

TEST(RecordCodecTest, EncodingIsDeterministic) {
  const std::vector<uint8_t> raw = Compressible(10000);
  EncodedRecord a, b;
  RecordEncoder e1(*Compression::Parse("zstd:5"));
  RecordEncoder e2(*Compression::Parse("zstd:5"));
  ASSERT_TRUE(e1.Encode(raw.data(), raw.size(), 1, "k", &a).ok());
  ASSERT_TRUE(e2.Encode(raw.data(), raw.size(), 1, "k", &b).ok());
  EXPECT_EQ(a.stored, b.stored);
  EXPECT_EQ(a.checksum, b.checksum);
}

TEST(RecordCodecTest, CorruptZstdFrameIsCorruption) {
  const std::vector<uint8_t> raw = Compressible(8192);
  RecordEncoder enc(*Compression::Parse("zstd"));
  EncodedRecord rec;
  ASSERT_TRUE(enc.Encode(raw.data(), raw.size(), 0, "k", &rec).ok());
  ASSERT_EQ(rec.codec, Codec::kZstd);
  RecordDecoder dec;
  std::vector<uint8_t> out(raw.size());

  std::vector<uint8_t> bad_magic = rec.stored;
  bad_magic[0] ^= 0xFF;
  Status s = dec.Decode(bad_magic.data(), bad_magic.size(), Codec::kZstd, out.data(), out.size());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message().rfind("zstd: ", 0), 0u) << s.message();

  std::vector<uint8_t> cut(rec.stored.begin(), rec.stored.end() - 3);
  s = dec.Decode(cut.data(), cut.size(), Codec::kZstd, out.data(), out.size());
  EXPECT_EQ(s.code(), StatusCode::kCorruption);

  // A frame whose content is smaller than the schema says.
  s = dec.Decode(rec.stored.data(), rec.stored.size(), Codec::kZstd, out.data(), out.size() + 10);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);

  // The decoder stays usable after errors.
  s = dec.Decode(rec.stored.data(), rec.stored.size(), Codec::kZstd, out.data(), out.size());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, raw);
}

TEST(RecordCodecTest, RawSizeMismatchAndUnknownCodec) {
  const uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t out[16];
  RecordDecoder dec;
  Status s = dec.Decode(data, 8, Codec::kNone, out, 7);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  s = dec.Decode(data, 8, static_cast<Codec>(7), out, 8);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("unknown codec 7"), std::string::npos) << s.message();
}

// DecodeChecked copies a raw record in 16 KiB blocks and hashes each block from the destination
// with XXH3's streaming API: the value must be RecordChecksum's for every size (the block edges
// included), the bytes exact, and one changed byte anywhere a checksum mismatch.
TEST(RecordCodecTest, DecodeCheckedEqualsChecksumThenDecode) {
  RecordEncoder raw_enc(*Compression::Parse("none"));
  RecordEncoder zstd_enc(*Compression::Parse("zstd:3"));
  RecordDecoder dec;
  for (size_t n : {size_t{0}, size_t{1}, size_t{240}, size_t{16383}, size_t{16384}, size_t{16385},
                   size_t{3 * 16384}, size_t{150528}, size_t{150529}}) {
    for (RecordEncoder* enc : {&raw_enc, &zstd_enc}) {
      SCOPED_TRACE("n=" + std::to_string(n) + (enc == &raw_enc ? " raw" : " zstd"));
      const std::vector<uint8_t> data = (n % 2) ? Random(n, 7) : Compressible(n);
      EncodedRecord rec;
      ASSERT_TRUE(enc->Encode(data.data(), n, -3, "k", &rec).ok());
      ASSERT_EQ(rec.checksum, RecordChecksum(rec.stored.data(), rec.stored.size(), -3));
      std::vector<uint8_t> out(n + 1, 0xAB);  // one guard byte past the end
      Status s = dec.DecodeChecked(rec.stored.data(), rec.stored.size(), rec.codec, -3,
                                   rec.checksum, out.data(), n);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin()));
      EXPECT_EQ(out[n], 0xAB) << "wrote past raw_size";
      // The wrong label (the seed) or one flipped stored byte: a mismatch naming both values.
      s = dec.DecodeChecked(rec.stored.data(), rec.stored.size(), rec.codec, 4, rec.checksum,
                            out.data(), n);
      EXPECT_EQ(s.code(), StatusCode::kCorruption);
      EXPECT_EQ(s.message().rfind("checksum mismatch (stored 0x", 0), 0u) << s.message();
      if (!rec.stored.empty()) {
        for (size_t at : {size_t{0}, rec.stored.size() / 2, rec.stored.size() - 1}) {
          std::vector<uint8_t> bad = rec.stored;
          bad[at] ^= 0x10;
          s = dec.DecodeChecked(bad.data(), bad.size(), rec.codec, -3, rec.checksum, out.data(), n);
          EXPECT_EQ(s.code(), StatusCode::kCorruption) << "flip at " << at;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Validate (kiln verify --deep) gives Decode's verdict on every record, and never writes a raw
// record anywhere.
TEST(RecordCodecTest, ValidateAgreesWithDecode) {
  RecordEncoder raw_enc(*Compression::Parse("none"));
  RecordEncoder zstd_enc(*Compression::Parse("zstd:3"));
  RecordDecoder dec;
  for (RecordEncoder* enc : {&raw_enc, &zstd_enc}) {
    const std::vector<uint8_t> data = Compressible(4096);
    EncodedRecord rec;
    ASSERT_TRUE(enc->Encode(data.data(), data.size(), 1, "k", &rec).ok());
    for (size_t raw_size : {size_t{4096}, size_t{4095}, size_t{4097}}) {
      std::vector<uint8_t> scratch(raw_size, 0xAB), out(raw_size);
      const Status v =
          dec.Validate(rec.stored.data(), rec.stored.size(), rec.codec, scratch.data(), raw_size);
      const Status d =
          dec.Decode(rec.stored.data(), rec.stored.size(), rec.codec, out.data(), raw_size);
      SCOPED_TRACE(std::string(enc == &raw_enc ? "raw" : "zstd") + " raw_size " +
                   std::to_string(raw_size));
      EXPECT_EQ(v.ok(), d.ok());
      EXPECT_EQ(v.ToString(), d.ToString());
      EXPECT_EQ(v.ok(), raw_size == data.size());
      if (enc == &raw_enc && v.ok()) {
        EXPECT_TRUE(std::all_of(scratch.begin(), scratch.end(), [](uint8_t b) {
          return b == 0xAB;
        })) << "a raw record was copied";
      }
    }
    // A damaged zstd frame fails both the same way.
    if (enc == &zstd_enc) {
      std::vector<uint8_t> bad = rec.stored;
      bad[bad.size() / 2] ^= 0xFF;
      std::vector<uint8_t> scratch(4096), out(4096);
      const Status v = dec.Validate(bad.data(), bad.size(), rec.codec, scratch.data(), 4096);
      const Status d = dec.Decode(bad.data(), bad.size(), rec.codec, out.data(), 4096);
      EXPECT_EQ(v.ToString(), d.ToString());
    }
  }
  std::vector<uint8_t> scratch(8);
  const uint8_t byte = 0;
  EXPECT_EQ(dec.Validate(&byte, 1, static_cast<Codec>(7), scratch.data(), 8).code(),
            StatusCode::kCorruption);
}

}  // namespace
}  // namespace kiln
