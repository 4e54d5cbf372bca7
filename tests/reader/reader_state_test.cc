// Tests of kiln::ReaderState's binary form (reader/reader_state.md): golden bytes, the round
// trip, and every refusal: truncation at every length, a flip of every byte, another version.
#include "reader/reader_state.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "formats/xxh3.h"

namespace kiln {
namespace {

// The worked example of reader/reader_state.md ("Worked example").
ReaderState Example() {
  ReaderState s;
  s.epoch = 3;
  s.samples_consumed = 4096;
  s.seed = 7;
  s.shuffle = ShuffleMode::kBlock;
  s.block_samples = 5461;
  s.window_blocks = 16;
  s.batch_size = 256;
  s.world_size = 8;
  s.tail = TailPolicy::kPad;
  s.drop_last = true;
  s.crop_height = 24;
  s.crop_width = 20;
  s.flip = true;
  s.num_samples = 1000000;
  s.dataset_fingerprint = 0x0123456789ABCDEFull;
  return s;
}

std::string Hex(const std::string& bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

void ExpectSame(const ReaderState& a, const ReaderState& b) {
  EXPECT_EQ(a.Encode(), b.Encode());
  EXPECT_EQ(a.ToString(), b.ToString());
}

// Golden bytes: any change to the layout or the checksum fails here (and must bump
// kReaderStateVersion, with the spec).
TEST(ReaderStateTest, EncodingMatchesGoldenBytes) {
  const std::string bytes = Example().Encode();
  ASSERT_EQ(bytes.size(), kReaderStateBytes);
  EXPECT_EQ(Hex(bytes),
            "4b52535401006000"  // "KRST", version 1, length 96
            "02000000"          // sampler order version 2
            "02020300"          // shuffle block, tail pad, drop_last|flip, reserved
            "0300000000000000"  // epoch 3
            "0010000000000000"  // 4096 samples consumed
            "0700000000000000"  // seed 7
            "40420f0000000000"  // 1,000,000 samples
            "efcdab8967452301"  // fingerprint
            "5515000000000000"  // 5461 samples per block
            "10000000"          // window 16
            "00010000"          // batch size 256
            "08000000"          // world size 8
            "18000000"
            "14000000"            // crop 24 x 20
            "00000000"            // reserved
            "c80903eb928a1fd3");  // XXH3-64 of bytes [0, 88), little-endian
  // The checksum covers bytes [0, 88).
  uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) stored |= uint64_t{static_cast<uint8_t>(bytes[88 + i])} << (8 * i);
  EXPECT_EQ(stored, Xxh3(bytes.data(), 88));
}

TEST(ReaderStateTest, RoundTrip) {
  const ReaderState s = Example();
  Result<ReaderState> back = ReaderState::Decode(s.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, s);
  EXPECT_EQ(back->epoch, 3u);
  EXPECT_EQ(back->samples_consumed, 4096u);
  EXPECT_EQ(back->shuffle, ShuffleMode::kBlock);
  EXPECT_EQ(back->tail, TailPolicy::kPad);
  EXPECT_TRUE(back->drop_last);
  EXPECT_TRUE(back->flip);
  EXPECT_EQ(back->dataset_fingerprint, 0x0123456789ABCDEFull);
  // Extreme values survive.
  ReaderState big;
  big.epoch = big.samples_consumed = big.seed = big.num_samples = ~uint64_t{0};
  big.batch_size = big.world_size = ~uint32_t{0};
  back = ReaderState::Decode(big.Encode());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, big);
}

// RandomResizedCrop sets flag bit 2 and puts its scale/ratio digest at byte 84; without the
// flag those bytes stay reserved (the golden bytes above do not change).
TEST(ReaderStateTest, ResizedCropFlagAndDigestRoundTrip) {
  ReaderState s = Example();
  s.resized_crop = true;
  s.resized_crop_digest = 0xA1B2C3D4u;
  const std::string bytes = s.Encode();
  EXPECT_EQ(static_cast<uint8_t>(bytes[14]) & 4, 4);
  EXPECT_EQ(static_cast<uint8_t>(bytes[84]), 0xD4);
  EXPECT_EQ(static_cast<uint8_t>(bytes[87]), 0xA1);
  Result<ReaderState> back = ReaderState::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->resized_crop);
  EXPECT_EQ(back->resized_crop_digest, 0xA1B2C3D4u);
  EXPECT_EQ(Example().Encode().substr(84, 4), std::string(4, '\0'));
}

TEST(ReaderStateTest, EveryTruncationIsRefused) {
  const std::string bytes = Example().Encode();
  for (size_t len = 0; len < bytes.size(); ++len) {
    Result<ReaderState> r = ReaderState::Decode(bytes.substr(0, len));
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << len;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
  Result<ReaderState> longer = ReaderState::Decode(bytes + "x");
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kCorruption);
}

TEST(ReaderStateTest, EveryFlippedByteIsRefused) {
  const std::string bytes = Example().Encode();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t bit : {0x01, 0x80}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ bit);
      Result<ReaderState> r = ReaderState::Decode(bad);
      ASSERT_FALSE(r.ok()) << "byte " << i;
      // A flip in the version field reads as another version; anything else as corruption.
      const StatusCode want =
          (i == 4 || i == 5) ? StatusCode::kNotSupported : StatusCode::kCorruption;
      EXPECT_EQ(r.status().code(), want) << "byte " << i << ": " << r.status().ToString();
    }
  }
}

// Re-checksummed damage: fields out of range are named, another version is NotSupported.
TEST(ReaderStateTest, RechecksummedBadFieldsAreRefused) {
  auto rechecksum = [](std::string b) {
    const uint64_t sum = Xxh3(b.data(), 88);
    for (int i = 0; i < 8; ++i) b[88 + i] = static_cast<char>(sum >> (8 * i));
    return b;
  };
  const std::string bytes = Example().Encode();
  struct Case {
    size_t offset;
    uint8_t value;
    StatusCode code;
    const char* words;
  };
  const Case cases[] = {
      {4, 3, StatusCode::kNotSupported, "version 3"},
      {12, 3, StatusCode::kCorruption, "shuffle mode 3"},
      {13, 9, StatusCode::kCorruption, "tail policy 9"},
      {14, 8, StatusCode::kCorruption, "reserved"},
      {15, 1, StatusCode::kCorruption, "reserved"},
      {85, 1, StatusCode::kCorruption, "reserved"},
      {0, 'k', StatusCode::kCorruption, "KRST"},
  };
  for (const Case& c : cases) {
    std::string bad = bytes;
    bad[c.offset] = static_cast<char>(c.value);
    Result<ReaderState> r = ReaderState::Decode(rechecksum(bad));
    ASSERT_FALSE(r.ok()) << c.offset;
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.words), std::string::npos) << r.status().ToString();
  }
  std::string zero_batch = bytes;
  for (int i = 68; i < 72; ++i) zero_batch[i] = 0;
  EXPECT_EQ(ReaderState::Decode(rechecksum(zero_batch)).status().code(), StatusCode::kCorruption);
  // A version-1 state relabelled version 2 lacks the mixture section.
  std::string relabelled = bytes;
  relabelled[4] = 2;
  EXPECT_EQ(ReaderState::Decode(rechecksum(relabelled)).status().code(), StatusCode::kCorruption);
}

// The worked example of reader/reader_state.md ("Version 2"): a mixture of two datasets.
ReaderState MixtureExample() {
  ReaderState s;
  s.epoch = 1;
  s.samples_consumed = 512;
  s.seed = 7;
  s.batch_size = 64;
  s.world_size = 4;
  s.num_samples = 10000;
  s.dataset_fingerprint = 0x1111111111111111ull;
  s.mixture_version = 1;
  s.mixture_sources = {{0x0123456789ABCDEFull, 50000, 7000}, {0xFEDCBA9876543210ull, 1000, 3000}};
  return s;
}

TEST(ReaderStateTest, MixtureSectionMatchesGoldenBytesAndRoundTrips) {
  const std::string bytes = MixtureExample().Encode();
  ASSERT_EQ(bytes.size(), ReaderStateBytes(2));
  ASSERT_EQ(bytes.size(), 152u);
  EXPECT_EQ(Hex(bytes.substr(0, 8)), "4b52535402009800");   // "KRST", version 2, length 152
  EXPECT_EQ(Hex(bytes.substr(88, 8)), "0100000002000000");  // mixture version 1, 2 sources
  EXPECT_EQ(Hex(bytes.substr(96, 24)),
            "efcdab8967452301"    // source 0 fingerprint
            "50c3000000000000"    // 50000 samples
            "581b000000000000");  // quota 7000
  // XXH3-64 of bytes [0, 144), 962bbf8a996fe6f5 (cross-checked with `xxhsum -H3` on bytes
  // built from reader/reader_state.md by hand), stored little-endian.
  EXPECT_EQ(Hex(bytes.substr(144, 8)), "f5e66f998abf2b96");
  Result<ReaderState> back = ReaderState::Decode(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(*back, MixtureExample());
  ASSERT_EQ(back->mixture_sources.size(), 2u);
  EXPECT_EQ(back->mixture_sources[1].quota, 3000u);
  EXPECT_EQ(back->mixture_version, 1u);
}

TEST(ReaderStateTest, EveryTruncationAndFlipOfAMixtureStateIsRefused) {
  const std::string bytes = MixtureExample().Encode();
  for (size_t len = 0; len < bytes.size(); ++len) {
    Result<ReaderState> r = ReaderState::Decode(bytes.substr(0, len));
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << len;
  }
  EXPECT_FALSE(ReaderState::Decode(bytes + "x").ok());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    Result<ReaderState> r = ReaderState::Decode(bad);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    const StatusCode want =
        (i == 4 || i == 5) ? StatusCode::kNotSupported : StatusCode::kCorruption;
    EXPECT_EQ(r.status().code(), want) << "byte " << i << ": " << r.status().ToString();
  }
}

}  // namespace
}  // namespace kiln
