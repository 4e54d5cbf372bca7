// The host side of the fused normalise kernel (reader/normalize_kernel.h): FloatToHalfBits is
// round-to-nearest-even binary16 (checked against GCC's _Float16 conversion on every tie and
// neighbour of every half value, and a sweep of all float exponents), the CPU reference computes
// the three roundings of the formula in [0, 1] units, and NormalizedSchema refuses what the
// kernel cannot do. The kernel itself is compared with these on a GPU (gpu_upload_test).
#include "reader/normalize_kernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

float HalfValue(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

uint16_t Reference(float f) {
  const _Float16 h = static_cast<_Float16>(f);  // GCC: IEEE binary16, round to nearest even
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

TEST(FloatToHalfBitsTest, KnownValues) {
  EXPECT_EQ(FloatToHalfBits(0.f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(1.f), 0x3c00);
  EXPECT_EQ(FloatToHalfBits(-2.f), 0xc000);
  EXPECT_EQ(FloatToHalfBits(65504.f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65519.f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.f, -25)), 0x0000);  // tie with 0: even
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.f, -25)), 0x0002);            // 1.5 units: tie to even (2)
  EXPECT_EQ(FloatToHalfBits(1.f + std::ldexp(1.f, -11)), 0x3c00);      // tie, down to even
  EXPECT_EQ(FloatToHalfBits(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);  // tie, up to even
  EXPECT_EQ(FloatToHalfBits(std::nanf("")) & 0x7e00, 0x7e00);
}

// Every half value h: the float at h, at the midpoint to h + 1 and one float ulp either side
// of it, in both signs. That covers every rounding decision the conversion makes.
TEST(FloatToHalfBitsTest, EveryTieAndNeighbourMatchesGcc) {
  uint64_t checked = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = HalfValue(static_cast<uint16_t>(h));
    const float hi = HalfValue(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both are halves, the midpoint is a float
    const uint32_t mb = Bits(mid);
    for (float f : {lo, mid, FromBits(mb - 1), FromBits(mb + 1)}) {
      for (float s : {f, -f}) {
        ASSERT_EQ(FloatToHalfBits(s), Reference(s)) << "float bits " << std::hex << Bits(s);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 250000u);
}

TEST(FloatToHalfBitsTest, SweepOfAllFloatsMatchesGcc) {
  for (uint64_t b = 0; b <= 0xffffffffull; b += 65521) {  // a prime stride: every exponent
    const float f = FromBits(static_cast<uint32_t>(b));
    if (std::isnan(f)) {
      EXPECT_EQ(FloatToHalfBits(f) & 0x7e00, 0x7e00);
      continue;
    }
    ASSERT_EQ(FloatToHalfBits(f), Reference(f)) << "float bits " << std::hex << b;
  }
}

TEST(NormalizeSampleOnHostTest, ThreeRoundingsInUnitRange) {
  const TensorSchema s = MakeSchema(1, 2, 3);
  const uint8_t in[6] = {0, 255, 128, 1, 2, 3};  // HWC: pixel 0 = (0, 255, 128)
  const NormalizeOptions no = ImageNetNormalize();
  float out[6];
  NormalizeSampleOnHost(in, s, no, out);
  for (uint32_t c = 0; c < 3; ++c) {
    for (uint32_t x = 0; x < 2; ++x) {
      volatile float v = static_cast<float>(in[x * 3 + c]);
      volatile float scaled = v * kNormalizeScale;
      volatile float centred = scaled - no.mean[c];
      const float want = centred / no.std[c];
      EXPECT_EQ(std::memcmp(&out[c * 2 + x], &want, 4), 0) << "channel " << c << " x " << x;
    }
  }
  EXPECT_FLOAT_EQ(out[0], (0.f - 0.485f) / 0.229f);
  EXPECT_FLOAT_EQ(out[2], (1.f - 0.456f) / 0.224f);
  // The float16 form is the RNE conversion of the float32 one.
  uint16_t half[6];
  NormalizeSampleOnHost(in, s, no, DType::kFloat16, half);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(half[i], FloatToHalfBits(out[i])) << i;
}

TEST(NormalizedSchemaTest, RefusesWhatTheKernelCannotDo) {
  NormalizeOptions no;
  Result<TensorSchema> ok = NormalizedSchema(MakeSchema(8, 6, 3), AugmentOptions{}, no);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->layout, Layout::kCHW);
  EXPECT_EQ(ok->dtype, DType::kFloat32);
  no.std[1] = 0.f;
  EXPECT_EQ(NormalizedSchema(MakeSchema(8, 6, 3), AugmentOptions{}, no).status().code(),
            StatusCode::kInvalidArgument);
  no.std[1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(NormalizedSchema(MakeSchema(8, 6, 3), AugmentOptions{}, no).status().code(),
            StatusCode::kInvalidArgument);
  NormalizeOptions fine;
  EXPECT_FALSE(NormalizedSchema(MakeSchema(8, 6, 5), AugmentOptions{}, fine).ok());
  fine.out_dtype = DType::kUint8;
  EXPECT_FALSE(NormalizedSchema(MakeSchema(8, 6, 3), AugmentOptions{}, fine).ok());
}

}  // namespace
}  // namespace kiln
