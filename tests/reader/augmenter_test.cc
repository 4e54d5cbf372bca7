// Tests for reader/augmenter.h on its own: the augmented schema and its refusals, the drawn
// parameters (a pure function of seed, epoch and sample; every crop position and both flips
// reachable; within range), and the crop and flip of every dtype and layout against a reference
// written from the header. The Loader's use of it is in tests/reader/loader_test.cc.
#include "reader/augmenter.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::MakeSchema;

// Element (y, x, channel) of a sample of schema `s` at `bytes`, as raw element bytes.
std::vector<uint8_t> Element(const std::vector<uint8_t>& bytes, const TensorSchema& s, size_t y,
                             size_t x, size_t ch) {
  const size_t elem = DTypeSize(s.dtype);
  const size_t i = s.layout == Layout::kHWC ? (y * s.width + x) * s.channels + ch
                                            : (ch * s.height + y) * s.width + x;
  return std::vector<uint8_t>(bytes.begin() + i * elem, bytes.begin() + (i + 1) * elem);
}

// A sample whose every byte differs from its neighbours (so a misplaced element shows).
std::vector<uint8_t> Distinct(const TensorSchema& s) {
  std::vector<uint8_t> bytes(s.sample_bytes());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + i / 251);
  return bytes;
}

TEST(AugmenterTest, SchemaIsTheCropOrTheStoredOne) {
  const TensorSchema stored = MakeSchema(10, 12, 3);
  Result<TensorSchema> same = AugmentedSchema(stored, AugmentOptions{});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, stored);
  AugmentOptions flip_only;
  flip_only.flip = true;
  EXPECT_EQ(*AugmentedSchema(stored, flip_only), stored);
  AugmentOptions crop;
  crop.crop_height = 4;
  crop.crop_width = 12;
  Result<TensorSchema> cropped = AugmentedSchema(stored, crop);
  ASSERT_TRUE(cropped.ok());
  EXPECT_EQ(cropped->height, 4u);
  EXPECT_EQ(cropped->width, 12u);
  EXPECT_EQ(cropped->channels, 3u);
  EXPECT_EQ(cropped->dtype, stored.dtype);
  EXPECT_EQ(cropped->layout, stored.layout);
}

// The center crop: the largest box of the output's aspect ratio times the ratio, centred; its
// schema is the output size; it excludes the other crops and the ratio must be in (0, 1].
TEST(AugmenterTest, CenterCropBoxAndSchema) {
  AugmentOptions o;
  o.center_crop_height = o.center_crop_width = 224;  // square output, ratio 224/256
  const CropBox wide = CenterCropBox(300, 400, o);   // H x W
  EXPECT_EQ(wide.height, 262u);                      // 300 * 0.875 = 262.5, rounded half to even
  EXPECT_EQ(wide.width, wide.height);
  EXPECT_EQ(wide.top, (300 - wide.height) / 2);
  EXPECT_EQ(wide.left, (400 - wide.width) / 2);
  o.center_crop_ratio = 1.0;
  o.center_crop_height = 100;
  o.center_crop_width = 200;  // a 2:1 output on a tall image spans its width
  const CropBox tall = CenterCropBox(400, 100, o);
  EXPECT_EQ(tall.width, 100u);
  EXPECT_EQ(tall.height, 50u);
  EXPECT_EQ(tall.top, 175u);
  EXPECT_EQ(tall.left, 0u);
  const TensorSchema stored = MakeSchema(40, 50, 3);
  Result<TensorSchema> s = AugmentedSchema(stored, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->height, 100u);
  EXPECT_EQ(s->width, 200u);
  const AugmentParams p = DrawAugmentParams(stored, o, 1, 2, 3);
  EXPECT_EQ(p.box_width, 50u);
  EXPECT_EQ(p.box_height, 25u);
  AugmentOptions bad = o;
  bad.resize_height = bad.resize_width = 8;
  EXPECT_FALSE(AugmentedSchema(stored, bad).ok());
  bad = o;
  bad.center_crop_ratio = 0;
  EXPECT_FALSE(AugmentedSchema(stored, bad).ok());
  bad = o;
  bad.center_crop_width = 0;
  EXPECT_FALSE(AugmentedSchema(stored, bad).ok());
  EXPECT_NE(CenterCropDigest(o), ResizedCropDigest(o));
}

TEST(AugmenterTest, SchemaRefusesHalfACropAndACropLargerThanTheSample) {
  const TensorSchema stored = MakeSchema(10, 12, 3);
  AugmentOptions half;
  half.crop_height = 4;
  EXPECT_EQ(AugmentedSchema(stored, half).status().code(), StatusCode::kInvalidArgument);
  half.crop_height = 0;
  half.crop_width = 4;
  EXPECT_EQ(AugmentedSchema(stored, half).status().code(), StatusCode::kInvalidArgument);
  AugmentOptions large;
  large.crop_height = 11;
  large.crop_width = 12;
  Status s = AugmentedSchema(stored, large).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("11x12"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("10x12"), std::string::npos) << s.message();
  large.crop_height = 10;
  large.crop_width = 13;
  EXPECT_EQ(AugmentedSchema(stored, large).status().code(), StatusCode::kInvalidArgument);
}

TEST(AugmenterTest, ParamsArePureAndCoverEveryPositionAndBothFlips) {
  const TensorSchema stored = MakeSchema(6, 9, 1);
  AugmentOptions o;
  o.crop_height = 4;  // top in [0, 2]
  o.crop_width = 5;   // left in [0, 4]
  o.flip = true;
  std::set<std::pair<uint32_t, uint32_t>> positions;
  int flips = 0;
  constexpr int kSamples = 2000;
  for (uint64_t i = 0; i < kSamples; ++i) {
    const AugmentParams p = DrawAugmentParams(stored, o, 7, 3, i);
    const AugmentParams again = DrawAugmentParams(stored, o, 7, 3, i);
    EXPECT_EQ(p.top, again.top);
    EXPECT_EQ(p.left, again.left);
    EXPECT_EQ(p.flip, again.flip);
    ASSERT_LE(p.top, 2u);
    ASSERT_LE(p.left, 4u);
    positions.insert({p.top, p.left});
    flips += p.flip;
  }
  EXPECT_EQ(positions.size(), 15u) << "every one of the 3 x 5 crop positions is drawn";
  // Fair coin: 2000 draws land within 1000 +- 150 (about 6.7 standard deviations).
  EXPECT_GT(flips, 850);
  EXPECT_LT(flips, 1150);
}

TEST(AugmenterTest, ParamsDependOnSeedEpochAndSample) {
  const TensorSchema stored = MakeSchema(64, 64, 1);
  AugmentOptions o;
  o.crop_height = 8;
  o.crop_width = 8;
  o.flip = true;
  const auto same = [](const AugmentParams& a, const AugmentParams& b) {
    return a.top == b.top && a.left == b.left && a.flip == b.flip;
  };
  int seed_differs = 0, epoch_differs = 0, sample_differs = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    const AugmentParams p = DrawAugmentParams(stored, o, 1, 0, i);
    seed_differs += !same(p, DrawAugmentParams(stored, o, 2, 0, i));
    epoch_differs += !same(p, DrawAugmentParams(stored, o, 1, 1, i));
    sample_differs += !same(p, DrawAugmentParams(stored, o, 1, 0, i + 100));
  }
  // 57 x 57 x 2 outcomes: two independent draws agree about 1 time in 6500.
  EXPECT_GE(seed_differs, 98);
  EXPECT_GE(epoch_differs, 98);
  EXPECT_GE(sample_differs, 98);
}

TEST(AugmenterTest, NoCropNoFlipDrawsTheIdentity) {
  const TensorSchema stored = MakeSchema(5, 7, 3);
  AugmentOptions o;
  for (uint64_t i = 0; i < 50; ++i) {
    const AugmentParams p = DrawAugmentParams(stored, o, 9, 0, i);
    EXPECT_EQ(p.top, 0u);
    EXPECT_EQ(p.left, 0u);
    EXPECT_FALSE(p.flip);
  }
  const std::vector<uint8_t> in = Distinct(stored);
  std::vector<uint8_t> out(in.size());
  ApplyAugment(in.data(), stored, AugmentParams{}, stored, out.data());
  EXPECT_EQ(out, in);
}

TEST(AugmenterTest, CropAndFlipMoveWholeElementsForEveryDtypeAndLayout) {
  for (Layout layout : {Layout::kHWC, Layout::kCHW}) {
    for (DType dtype : {DType::kUint8, DType::kFloat16, DType::kFloat32}) {
      for (uint32_t channels : {1u, 3u}) {
        const TensorSchema stored = MakeSchema(7, 9, channels, layout, dtype);
        const std::vector<uint8_t> in = Distinct(stored);
        const TensorSchema crop = MakeSchema(4, 5, channels, layout, dtype);
        for (const AugmentParams p : {AugmentParams{0, 0, false}, AugmentParams{3, 4, false},
                                      AugmentParams{1, 2, true}, AugmentParams{3, 0, true}}) {
          SCOPED_TRACE(::testing::Message()
                       << (layout == Layout::kHWC ? "HWC" : "CHW") << " dtype "
                       << static_cast<int>(dtype) << " c" << channels << " top " << p.top
                       << " left " << p.left << " flip " << p.flip);
          std::vector<uint8_t> out(crop.sample_bytes(), 0xEE);
          ApplyAugment(in.data(), stored, p, crop, out.data());
          for (size_t y = 0; y < crop.height; ++y) {
            for (size_t x = 0; x < crop.width; ++x) {
              const size_t sx = p.left + (p.flip ? crop.width - 1 - x : x);
              for (size_t ch = 0; ch < channels; ++ch) {
                ASSERT_EQ(Element(out, crop, y, x, ch), Element(in, stored, p.top + y, sx, ch))
                    << "output (" << y << ", " << x << ", " << ch << ")";
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
