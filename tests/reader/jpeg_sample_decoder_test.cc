// Tests for reader/jpeg_sample_decoder.h on its own (no converter, no OpenCV): the golden JPEG
// records of tests/data/golden-jpeg decoded whole and through the crop path, the flip, the
// errors of damaged records (Corruption, never a crash, the decoder reusable afterwards), and the
// RecordDecoder hook (checksum first, NotSupported without a decoder). The end-to-end tests
// (pack, loader, verify) are tests/tools/jpeg_records_test.cc.
#include "reader/jpeg_sample_decoder.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/shards/shard_reader.h"
#include "reader/augmenter.h"

namespace kiln {
namespace {

const std::string kGolden =
    std::string(KILN_SOURCE_DIR) + "/tests/data/golden-jpeg/shard-00000.kiln";

class JpegSampleDecoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<ShardReader>> shard = ShardReader::Open(kGolden);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    shard_ = std::move(*shard);
    for (uint64_t i = 0; i < 2; ++i) {
      const ShardIndexEntry e = shard_->entry(i);
      records_.emplace_back(shard_->stored(e), shard_->stored(e) + e.stored_size);
      raw_.push_back(e.raw_size);
    }
  }
  static AugmentOptions Center(uint32_t h, uint32_t w, bool flip = false) {
    AugmentOptions a;
    a.center_crop_height = h;
    a.center_crop_width = w;
    a.center_crop_ratio = 1.0;
    a.flip = flip;
    return a;
  }

  std::unique_ptr<ShardReader> shard_;
  std::vector<std::vector<uint8_t>> records_;
  std::vector<uint32_t> raw_;
};

TEST_F(JpegSampleDecoderTest, HeaderAndWholeDecode) {
  JpegSampleDecoder d(3, 16);
  Result<JpegInfo> info = d.ReadInfo(records_[0].data(), records_[0].size());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->width, 16u);
  EXPECT_EQ(info->height, 8u);
  EXPECT_EQ(info->components, 3u);
  std::vector<uint8_t> pixels;
  ASSERT_TRUE(d.DecodeFull(records_[1].data(), records_[1].size(), &pixels).ok());
  ASSERT_EQ(pixels.size(), 8u * 12 * 3);
  // Record 1: a grey ramp 20 + 15 * row.
  for (uint32_t y = 0; y < 12; ++y) {
    EXPECT_NEAR(pixels[(y * 8 + 4) * 3], 20 + 15 * y, 6) << "row " << y;
  }
  std::vector<uint8_t> scratch(raw_[0]);
  EXPECT_TRUE(
      d.ValidateImage(records_[0].data(), records_[0].size(), raw_[0], scratch.data()).ok());
}

TEST_F(JpegSampleDecoderTest, CenterCropAndFlip) {
  std::vector<uint8_t> out(4 * 8 * 3), mirrored(4 * 8 * 3);
  JpegSampleDecoder plain(3, Center(4, 8), 4, 8, 0, 16);
  ASSERT_TRUE(plain.DecodeImage(records_[0].data(), records_[0].size(), raw_[0], out.data()).ok());
  EXPECT_NEAR(out[(1 * 8 + 0) * 3 + 0], 200, 12);  // left: red
  EXPECT_NEAR(out[(1 * 8 + 7) * 3 + 2], 220, 12);  // right: blue
  // With flip on, find a sample whose draw mirrors: its columns are the plain ones reversed.
  const AugmentOptions flip = Center(4, 8, true);
  const TensorSchema image{DType::kUint8, Layout::kHWC, 8, 16, 3};
  uint64_t sample = 0;
  while (!DrawAugmentParams(image, flip, 5, 0, sample).flip) ++sample;
  JpegSampleDecoder flipping(3, flip, 4, 8, 5, 16);
  flipping.SetSample(0, sample);
  ASSERT_TRUE(
      flipping.DecodeImage(records_[0].data(), records_[0].size(), raw_[0], mirrored.data()).ok());
  for (uint32_t y = 0; y < 4; ++y) {
    for (uint32_t x = 0; x < 8; ++x) {
      for (uint32_t c = 0; c < 3; ++c) {
        EXPECT_EQ(mirrored[(y * 8 + x) * 3 + c], out[(y * 8 + 7 - x) * 3 + c]);
      }
    }
  }
}

TEST_F(JpegSampleDecoderTest, RandomResizedCropIsAPureFunctionOfTheSample) {
  AugmentOptions a;
  a.resize_height = a.resize_width = 6;
  JpegSampleDecoder one(3, a, 6, 6, 9, 16), two(3, a, 6, 6, 9, 16);
  for (uint64_t s = 0; s < 20; ++s) {
    std::vector<uint8_t> x(6 * 6 * 3), y(6 * 6 * 3);
    one.SetSample(3, s);
    two.SetSample(3, s);
    ASSERT_TRUE(one.DecodeImage(records_[0].data(), records_[0].size(), raw_[0], x.data()).ok());
    ASSERT_TRUE(two.DecodeImage(records_[0].data(), records_[0].size(), raw_[0], y.data()).ok());
    EXPECT_EQ(x, y) << "sample " << s;
  }
}

TEST_F(JpegSampleDecoderTest, DamagedRecordsAreCorruptionAndTheDecoderRecovers) {
  JpegSampleDecoder d(3, Center(4, 8), 4, 8, 0, 16);
  std::vector<uint8_t> good(4 * 8 * 3), again(4 * 8 * 3);
  ASSERT_TRUE(d.DecodeImage(records_[0].data(), records_[0].size(), raw_[0], good.data()).ok());
  const std::vector<uint8_t>& r = records_[0];
  const struct {
    std::string name;
    std::vector<uint8_t> bytes;
    uint32_t raw;
    std::string message;
  } cases[] = {
      {"empty", {}, raw_[0], "JPEG: "},
      {"not a JPEG", std::vector<uint8_t>(100, 0x42), raw_[0], "JPEG: "},
      {"truncated", std::vector<uint8_t>(r.begin(), r.begin() + r.size() / 2), raw_[0], "JPEG: "},
      {"header only", std::vector<uint8_t>(r.begin(), r.begin() + 200), raw_[0], " at byte "},
      {"wrong raw size", r, raw_[0] + 3, "differs from the index's raw size"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> out(4 * 8 * 3);
    Status s = d.DecodeImage(c.bytes.data(), c.bytes.size(), c.raw, out.data());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    std::vector<uint8_t> scratch(c.raw);
    EXPECT_FALSE(d.ValidateImage(c.bytes.data(), c.bytes.size(), c.raw, scratch.data()).ok());
  }
  // Larger than the dataset's max side.
  JpegSampleDecoder small(3, Center(4, 8), 4, 8, 0, 8);
  Status s = small.DecodeImage(r.data(), r.size(), raw_[0], again.data());
  EXPECT_NE(s.message().find("exceeds the dataset's max side 8"), std::string::npos) << s.message();
  // After every error the same decoder decodes the good record to the same bytes.
  ASSERT_TRUE(d.DecodeImage(r.data(), r.size(), raw_[0], again.data()).ok());
  EXPECT_EQ(again, good);
}

TEST_F(JpegSampleDecoderTest, RecordDecoderChecksTheChecksumFirstAndNeedsADecoder) {
  const ShardIndexEntry e = shard_->entry(0);
  std::vector<uint8_t> out(4 * 8 * 3);
  RecordDecoder bare;
  Status s = bare.DecodeChecked(records_[0].data(), records_[0].size(), Codec::kJpeg, e.label,
                                e.checksum, out.data(), e.raw_size);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.ToString();
  RecordDecoder with;
  JpegSampleDecoder jpeg(3, Center(4, 8), 4, 8, 0, 16);
  with.set_image_decoder(&jpeg);
  EXPECT_TRUE(with.DecodeChecked(records_[0].data(), records_[0].size(), Codec::kJpeg, e.label,
                                 e.checksum, out.data(), e.raw_size)
                  .ok());
  s = with.DecodeChecked(records_[0].data(), records_[0].size(), Codec::kJpeg, e.label + 1,
                         e.checksum, out.data(), e.raw_size);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  // Deep validation through the hook: the whole image into a scratch of raw_size bytes.
  std::vector<uint8_t> scratch(e.raw_size);
  EXPECT_TRUE(with.Validate(records_[0].data(), records_[0].size(), Codec::kJpeg, scratch.data(),
                            e.raw_size)
                  .ok());
}

}  // namespace
}  // namespace kiln
