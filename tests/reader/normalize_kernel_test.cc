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

TEST(NormalizedSchemaTest, TakesBilinearResizedCropRefusesArea) {
  AugmentOptions rrc;
  rrc.resize_height = 48;
  rrc.resize_width = 56;
  Result<TensorSchema> out = NormalizedSchema(MakeSchema(61, 83, 3), rrc, NormalizeOptions{});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->height, 48u);
  EXPECT_EQ(out->width, 56u);
  EXPECT_EQ(out->layout, Layout::kCHW);
  rrc.interpolation = ResizeInterpolation::kArea;
  EXPECT_EQ(NormalizedSchema(MakeSchema(61, 83, 3), rrc, NormalizeOptions{}).status().code(),
            StatusCode::kNotSupported);
}

// The kernel's per-pixel bilinear value (normalize_kernel.cu: BilinearTap, Lerp, StoreU8), one
// output pixel at a time with every float operation forced to its own rounding (volatile), as
// the GPU thread computes it with the _rn intrinsics: no row cache, no SIMD, the flip as a tap
// index.
struct TestTap {
  uint32_t i0, i1;
  float w0, w1;
};
TestTap KernelTap(uint32_t in_size, uint32_t out_size, uint32_t d) {
  volatile float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  volatile float centre = static_cast<float>(d) + 0.5f;
  volatile float prod = scale * centre;
  volatile float src = prod - 0.5f;
  float s = src;
  if (s < 0.f) s = 0.f;
  TestTap t;
  t.i0 = static_cast<uint32_t>(s);
  t.i1 = t.i0 + (t.i0 < in_size - 1 ? 1u : 0u);
  volatile float w1 = s - static_cast<float>(t.i0);
  volatile float w0 = 1.0f - w1;
  t.w0 = w0;
  t.w1 = w1;
  return t;
}
float KernelLerp(float w0, float a, float w1, float b) {
  volatile float p0 = w0 * a;
  volatile float p1 = w1 * b;
  volatile float sum = p0 + p1;
  return sum;
}
void KernelEmulation(const uint8_t* in, const TensorSchema& stored, const AugmentParams& p,
                     uint32_t oh, uint32_t ow, const NormalizeOptions& no, float* out) {
  const uint32_t c = stored.channels;
  for (uint32_t y = 0; y < oh; ++y) {
    for (uint32_t x = 0; x < ow; ++x) {
      const uint32_t sx = p.flip ? ow - 1 - x : x;
      const TestTap tx = KernelTap(p.box_width, ow, sx), ty = KernelTap(p.box_height, oh, y);
      const uint8_t* r0 = in + ((size_t{p.top} + ty.i0) * stored.width + p.left) * c;
      const uint8_t* r1 = in + ((size_t{p.top} + ty.i1) * stored.width + p.left) * c;
      for (uint32_t ch = 0; ch < c; ++ch) {
        const float h0 = KernelLerp(tx.w0, r0[tx.i0 * c + ch], tx.w1, r0[tx.i1 * c + ch]);
        const float h1 = KernelLerp(tx.w0, r1[tx.i0 * c + ch], tx.w1, r1[tx.i1 * c + ch]);
        volatile float v = KernelLerp(ty.w0, h0, ty.w1, h1);
        volatile float up = v + 8388608.0f;
        volatile float r = up - 8388608.0f;
        const float u8 = static_cast<float>(static_cast<uint8_t>(static_cast<int>(r)));
        volatile float scaled = u8 * kNormalizeScale;
        volatile float centred = scaled - no.mean[ch];
        out[(size_t{ch} * oh + y) * ow + x] = centred / no.std[ch];
      }
    }
  }
}

// The CPU reference of the fused RandomResizedCrop (ApplyAugment's ResizeCropBilinear, then the
// normalisation) equals the kernel's per-pixel formula, bit for bit, on 200 samples per setting
// (RandomResizedCrop with down- and upsampled boxes, the center crop), flip on and off; float16
// is FloatToHalfBits of float32. This is what lets gpu_upload_test compare the GPU's bytes with
// NormalizeAugmentedSampleOnHost.
TEST(NormalizeAugmentedSampleOnHostTest, ResizedCropEqualsKernelFormula) {
  const TensorSchema stored = MakeSchema(61, 83, 3);
  const uint32_t n = 200;
  std::vector<uint8_t> host(size_t{n} * stored.sample_bytes());
  uint64_t x = 0x243f6a8885a308d3ull;
  for (uint8_t& v : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint8_t>(x >> 32);
  }
  AugmentOptions rrc;
  rrc.resize_height = 48;
  rrc.resize_width = 56;
  rrc.scale_min = 0.05;
  rrc.flip = true;
  AugmentOptions center;
  center.center_crop_height = 40;
  center.center_crop_width = 40;
  center.flip = true;
  const NormalizeOptions no = ImageNetNormalize();
  for (const AugmentOptions& aug : {rrc, center}) {
    SCOPED_TRACE(aug.resized_crop() ? "RandomResizedCrop" : "center crop");
    Result<TensorSchema> out_schema = NormalizedSchema(stored, aug, no);
    ASSERT_TRUE(out_schema.ok()) << out_schema.status().ToString();
    const uint32_t oh = out_schema->height, ow = out_schema->width;
    const size_t elems = size_t{oh} * ow * stored.channels;
    std::vector<float> got(elems), want(elems);
    std::vector<uint16_t> half(elems);
    uint32_t flips = 0, upsampled = 0;
    for (uint32_t k = 0; k < n; ++k) {
      const AugmentParams p = DrawAugmentParams(stored, aug, 7, 2, k);
      ASSERT_NE(p.box_height, 0u);
      flips += p.flip ? 1 : 0;
      upsampled += p.box_height < oh ? 1 : 0;
      const uint8_t* in = host.data() + size_t{k} * stored.sample_bytes();
      NormalizeAugmentedSampleOnHost(in, stored, p, *out_schema, no, DType::kFloat32, got.data());
      KernelEmulation(in, stored, p, oh, ow, no, want.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), elems * sizeof(float)), 0)
          << "sample " << k << " box " << p.box_height << "x" << p.box_width << " flip " << p.flip;
      NormalizeAugmentedSampleOnHost(in, stored, p, *out_schema, no, DType::kFloat16, half.data());
      for (size_t i = 0; i < elems; ++i) {
        ASSERT_EQ(half[i], FloatToHalfBits(want[i])) << "sample " << k << " element " << i;
      }
    }
    EXPECT_GT(flips, 0u);
    EXPECT_LT(flips, n);
    if (aug.resized_crop()) {
      EXPECT_GT(upsampled, 0u);
    }
  }
}

}  // namespace
}  // namespace kiln
