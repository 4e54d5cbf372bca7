// Tests for RandomResizedCrop in reader/augmenter.h: the drawn box (a pure function of seed,
// epoch and sample; inside the image and the scale/ratio bounds; torchvision's centre-crop
// fallback), the schema's refusals, the flip, and the bilinear resize against
// torchvision.transforms.functional.resized_crop (antialias=False) on the same image and box,
// run through /usr/bin/python3 when it has torchvision (skipped with a message otherwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/xxh3.h"
#include "reader/augmenter.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::MakeSchema;

AugmentOptions Rrc(uint32_t h, uint32_t w) {
  AugmentOptions o;
  o.resize_height = h;
  o.resize_width = w;
  return o;
}

TEST(ResizedCropTest, SchemaIsTheOutputSizeAndRefusesBadOptions) {
  const TensorSchema stored = MakeSchema(40, 50, 3);
  Result<TensorSchema> s = AugmentedSchema(stored, Rrc(24, 32));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->height, 24u);
  EXPECT_EQ(s->width, 32u);
  EXPECT_EQ(s->channels, 3u);
  EXPECT_TRUE(AugmentedSchema(stored, Rrc(100, 100)).ok()) << "upsampling is allowed";
  EXPECT_EQ(AugmentedSchema(stored, Rrc(24, 0)).status().code(), StatusCode::kInvalidArgument);
  AugmentOptions both = Rrc(24, 24);
  both.crop_height = both.crop_width = 8;
  EXPECT_EQ(AugmentedSchema(stored, both).status().code(), StatusCode::kInvalidArgument);
  AugmentOptions scale = Rrc(24, 24);
  scale.scale_max = 1.5;
  EXPECT_EQ(AugmentedSchema(stored, scale).status().code(), StatusCode::kInvalidArgument);
  AugmentOptions ratio = Rrc(24, 24);
  ratio.ratio_min = 2;
  ratio.ratio_max = 1;
  EXPECT_EQ(AugmentedSchema(stored, ratio).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AugmentedSchema(MakeSchema(40, 50, 3, Layout::kHWC, DType::kFloat16), Rrc(8, 8))
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(ResizedCropTest, BoxesArePureInsideTheImageAndWithinScaleAndRatio) {
  const TensorSchema stored = MakeSchema(300, 400, 3);
  const AugmentOptions o = Rrc(224, 224);
  std::set<uint32_t> tops, heights;
  for (uint64_t i = 0; i < 3000; ++i) {
    const AugmentParams p = DrawAugmentParams(stored, o, 11, 2, i);
    const AugmentParams again = DrawAugmentParams(stored, o, 11, 2, i);
    ASSERT_EQ(p.top, again.top);
    ASSERT_EQ(p.left, again.left);
    ASSERT_EQ(p.box_height, again.box_height);
    ASSERT_EQ(p.box_width, again.box_width);
    ASSERT_GT(p.box_height, 0u);
    ASSERT_GT(p.box_width, 0u);
    ASSERT_LE(p.top + p.box_height, 300u);
    ASSERT_LE(p.left + p.box_width, 400u);
    // w = round(sqrt(area * r)) and h = round(sqrt(area / r)) put sqrt(area * r) within
    // w +- 0.5 and sqrt(area / r) within h +- 0.5: area and r within these bounds of the box.
    const double w = p.box_width, h = p.box_height, image = 300.0 * 400.0;
    EXPECT_GE((w + 0.5) * (h + 0.5), 0.08 * image) << i;
    EXPECT_LE((w - 0.5) * (h - 0.5), image) << i;
    EXPECT_GE((w + 0.5) / (h - 0.5), 3.0 / 4.0) << i;
    EXPECT_LE((w - 0.5) / (h + 0.5), 4.0 / 3.0) << i;
    tops.insert(p.top);
    heights.insert(p.box_height);
  }
  EXPECT_GT(tops.size(), 100u);
  EXPECT_GT(heights.size(), 100u);
  EXPECT_NE(DrawAugmentParams(stored, o, 11, 3, 0).box_width * 1000 +
                DrawAugmentParams(stored, o, 11, 3, 0).left,
            DrawAugmentParams(stored, o, 11, 2, 0).box_width * 1000 +
                DrawAugmentParams(stored, o, 11, 2, 0).left)
      << "another epoch draws another box";
}

TEST(ResizedCropTest, TenMissesFallBackToTorchvisionsCentreCrop) {
  // A 10 x 1000 strip: every try's height (about sqrt(0.9 * 10000)) exceeds 10, so get_params
  // falls back: W/H = 100 > 4/3, so h = 10, w = round(10 * 4/3) = 13, centred.
  AugmentOptions o = Rrc(8, 8);
  o.scale_min = 0.9;
  const CropBox b = DrawResizedCropBox(10, 1000, o, 12345);
  EXPECT_EQ(b.height, 10u);
  EXPECT_EQ(b.width, 13u);
  EXPECT_EQ(b.top, 0u);
  EXPECT_EQ(b.left, 493u);
  // A 1000 x 10 strip: W/H = 0.01 < 3/4, so w = 10, h = round(10 / 0.75) = 13.
  const CropBox t = DrawResizedCropBox(1000, 10, o, 12345);
  EXPECT_EQ(t.width, 10u);
  EXPECT_EQ(t.height, 13u);
  EXPECT_EQ(t.top, 493u);
  EXPECT_EQ(t.left, 0u);
}

std::vector<uint8_t> SmoothImage(uint32_t h, uint32_t w, uint32_t c) {
  std::vector<uint8_t> img(size_t{h} * w * c);
  uint64_t x = 99;
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t i = 0; i < w; ++i)
      for (uint32_t ch = 0; ch < c; ++ch) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const double v = 128 + 90 * std::sin(0.21 * y + 0.13 * i + ch) + double((x >> 59)) - 16;
        img[(size_t{y} * w + i) * c + ch] = static_cast<uint8_t>(std::lround(v));
      }
  return img;
}

TEST(ResizedCropTest, FlipMirrorsTheResizedOutput) {
  const TensorSchema stored = MakeSchema(30, 40, 3);
  const std::vector<uint8_t> img = SmoothImage(30, 40, 3);
  const CropBox box{3, 5, 20, 27};
  std::vector<float> rows(2 * 17 * 3);
  std::vector<uint8_t> a(13 * 17 * 3), b(13 * 17 * 3);
  ResizeCropBilinear(img.data(), stored, box, 13, 17, false, a.data(), rows.data());
  ResizeCropBilinear(img.data(), stored, box, 13, 17, true, b.data(), rows.data());
  for (int y = 0; y < 13; ++y)
    for (int x = 0; x < 17; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(a[(y * 17 + x) * 3 + c], b[(y * 17 + (16 - x)) * 3 + c]) << y << "," << x;
}

// Runs torchvision's resized_crop on `img` (H x W x 3 uint8) for each box and returns its HWC
// outputs concatenated; empty when /usr/bin/python3 lacks torchvision.
std::vector<uint8_t> Torchvision(const TempDir& dir, const std::vector<uint8_t>& img, uint32_t h,
                                 uint32_t w, const std::vector<CropBox>& boxes, uint32_t oh,
                                 uint32_t ow) {
  if (std::system("/usr/bin/python3 -c 'import torchvision' >/dev/null 2>&1") != 0) return {};
  std::ofstream(dir / "in.raw", std::ios::binary)
      .write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
  std::ofstream py(dir / "tv.py");
  py << "import sys, numpy as np, torch\n"
        "import torchvision.transforms.functional as F\n"
        "from torchvision.transforms import InterpolationMode\n"
        "img = torch.from_numpy(np.fromfile(sys.argv[1], np.uint8).reshape("
     << h << "," << w << ",3)).permute(2, 0, 1)\nout = []\n";
  for (const CropBox& b : boxes) {
    py << "out.append(F.resized_crop(img, " << b.top << ", " << b.left << ", " << b.height << ", "
       << b.width << ", [" << oh << ", " << ow
       << "], InterpolationMode.BILINEAR, antialias=False).permute(1, 2, 0).numpy())\n";
  }
  py << "np.concatenate([o.reshape(-1) for o in out]).tofile(sys.argv[2])\n";
  py.close();
  const std::string cmd = "/usr/bin/python3 " + (dir / "tv.py") + " " + (dir / "in.raw") + " " +
                          (dir / "out.raw") + " 2>" + (dir / "err.txt");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << "torchvision script failed, see " << (dir / "err.txt");
  std::ifstream in(dir / "out.raw", std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(ResizedCropTest, MatchesTorchvisionResizedCropBilinearNoAntialias) {
  TempDir dir;
  constexpr uint32_t kH = 120, kW = 160, kOh = 56, kOw = 72;
  const std::vector<uint8_t> img = SmoothImage(kH, kW, 3);
  // Shrinking (more and less than 2x), upsampling, a one-pixel-high box, and the whole image.
  const std::vector<CropBox> boxes = {
      {0, 0, kH, kW}, {10, 20, 100, 130}, {5, 7, 30, 25}, {50, 60, 1, 40}, {1, 2, 117, 11}};
  const std::vector<uint8_t> ref = Torchvision(dir, img, kH, kW, boxes, kOh, kOw);
  if (ref.empty()) GTEST_SKIP() << "/usr/bin/python3 has no torchvision (python3-torchvision)";
  const size_t out_bytes = size_t{kOh} * kOw * 3;
  ASSERT_EQ(ref.size(), out_bytes * boxes.size());
  const TensorSchema stored = MakeSchema(kH, kW, 3);
  std::vector<float> rows(2 * kOw * 3);
  std::vector<uint8_t> ours(out_bytes);
  int max_diff = 0;
  double sum = 0;
  for (size_t k = 0; k < boxes.size(); ++k) {
    ResizeCropBilinear(img.data(), stored, boxes[k], kOh, kOw, false, ours.data(), rows.data());
    for (size_t i = 0; i < out_bytes; ++i) {
      const int d = std::abs(int{ours[i]} - int{ref[k * out_bytes + i]});
      max_diff = std::max(max_diff, d);
      sum += d;
    }
  }
  const double mean = sum / static_cast<double>(ref.size());
  std::printf("resized crop vs torchvision: max %d, mean %.6f over %zu values\n", max_diff, mean,
              ref.size());
  EXPECT_LE(max_diff, 1);
  EXPECT_LE(mean, 0.01);
}

// The header's pixel convention written out directly, one output value at a time, in the same
// float operations (scale = box / out as float, s = scale * (d + 0.5) - 0.5 clamped to >= 0,
// w1 = s - floor(s), w0 = 1 - w1; the horizontal products summed, then the vertical ones; uint8
// rounded half to even). Element (y, x, ch) of a sample is at `index(y, x, ch)`.
template <typename T, typename Index>
std::vector<T> ReferenceResize(const T* in, Index index, const CropBox& box, uint32_t oh,
                               uint32_t ow, uint32_t channels, bool flip, Index out_index) {
  auto tap = [](uint32_t in_size, uint32_t out_size, uint32_t d, uint32_t* i0, uint32_t* i1,
                float* w0, float* w1) {
    const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
    float s = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
    if (s < 0) s = 0;
    *i0 = static_cast<uint32_t>(s);
    *i1 = std::min(*i0 + 1, in_size - 1);
    *w1 = s - static_cast<float>(*i0);
    *w0 = 1.0f - *w1;
  };
  std::vector<T> out(size_t{oh} * ow * channels);
  for (uint32_t y = 0; y < oh; ++y) {
    uint32_t y0, y1;
    float v0, v1;
    tap(box.height, oh, y, &y0, &y1, &v0, &v1);
    for (uint32_t x = 0; x < ow; ++x) {
      uint32_t x0, x1;
      float u0, u1;
      tap(box.width, ow, x, &x0, &x1, &u0, &u1);
      for (uint32_t ch = 0; ch < channels; ++ch) {
        auto at = [&](uint32_t sy, uint32_t sx) {
          return static_cast<float>(in[index(box.top + sy, box.left + sx, ch)]);
        };
        const float top = u0 * at(y0, x0) + u1 * at(y0, x1);
        const float bottom = u0 * at(y1, x0) + u1 * at(y1, x1);
        const float v = v0 * top + v1 * bottom;
        T& o = out[out_index(y, flip ? ow - 1 - x : x, ch)];
        if constexpr (sizeof(T) == 1) {
          o = static_cast<T>(std::nearbyint(v));
        } else {
          o = v;
        }
      }
    }
  }
  return out;
}

// ResizeCropBilinear (on x86-64 with AVX2 its vectorised uint8 path) against the reference above,
// value for value, on random boxes and output sizes: shrinking and upsampling, one-pixel boxes,
// boxes touching every edge (the sample sits at the very end of its buffer, so a read past it
// shows under AddressSanitizer), both flips, 1 to 8 channels, HWC and CHW, uint8 and float32.
TEST(ResizedCropTest, ResizeEqualsTheReferenceOnRandomBoxes) {
  uint64_t x = 2024;
  auto next = [&x](uint32_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>((x >> 33) % n);
  };
  std::set<std::pair<uint32_t, bool>> hwc_uint8;  // (channels, flip) covered
  for (int iter = 0; iter < 600; ++iter) {
    const uint32_t channels = next(8) == 0 ? 5 + next(4) : 1 + next(4);
    const Layout layout = next(4) == 0 ? Layout::kCHW : Layout::kHWC;
    const DType dtype = next(5) == 0 ? DType::kFloat32 : DType::kUint8;
    const uint32_t h = 1 + next(70), w = 1 + next(70);
    const TensorSchema stored = MakeSchema(h, w, channels, layout, dtype);
    CropBox box;
    switch (next(4)) {
      case 0:  // the whole sample
        box = {0, 0, h, w};
        break;
      case 1:  // the bottom-right corner
        box.height = 1 + next(h);
        box.width = 1 + next(w);
        box.top = h - box.height;
        box.left = w - box.width;
        break;
      default:
        box.height = 1 + next(h);
        box.width = 1 + next(w);
        box.top = next(h - box.height + 1);
        box.left = next(w - box.width + 1);
    }
    const uint32_t oh = 1 + next(90), ow = 1 + next(90);
    const bool flip = next(2) != 0;
    SCOPED_TRACE(::testing::Message()
                 << "iter " << iter << " c" << channels
                 << (layout == Layout::kHWC ? " HWC" : " CHW")
                 << (dtype == DType::kUint8 ? " uint8 " : " float32 ") << h << "x" << w << " box "
                 << box.top << "," << box.left << " " << box.height << "x" << box.width << " -> "
                 << oh << "x" << ow << " flip " << flip);
    auto index_of = [channels, layout](uint32_t height, uint32_t width) {
      return [=](uint32_t y, uint32_t xx, uint32_t ch) {
        return layout == Layout::kHWC ? (size_t{y} * width + xx) * channels + ch
                                      : (size_t{ch} * height + y) * width + xx;
      };
    };
    std::vector<float> rows(size_t{2} * ow * channels);
    auto check = [&](auto type) {
      using T = decltype(type);
      const size_t n = size_t{h} * w * channels;
      // The sample at the end of a larger buffer, its values random.
      std::vector<T> buffer(n + 5);
      for (T& v : buffer) v = static_cast<T>(next(256));
      const T* in = buffer.data() + 5;
      std::vector<T> got(size_t{oh} * ow * channels, T{77});
      ResizeCropBilinear(reinterpret_cast<const uint8_t*>(in), stored, box, oh, ow, flip,
                         reinterpret_cast<uint8_t*>(got.data()), rows.data());
      const std::vector<T> want =
          ReferenceResize(in, index_of(h, w), box, oh, ow, channels, flip, index_of(oh, ow));
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "output value " << i;
      }
    };
    if (dtype == DType::kUint8) {
      check(uint8_t{});
      if (layout == Layout::kHWC && channels <= 4) hwc_uint8.insert({channels, flip});
    } else {
      check(float{});
    }
  }
  EXPECT_EQ(hwc_uint8.size(), 8u) << "uint8 HWC with 1 to 4 channels, flipped and not";
}

TEST(ResizedCropTest, AreaAveragesEachWindow) {
  // One channel, 4 x 5: a 2x shrink in height, 5 -> 2 in width (windows [0, 3) and [2, 5)).
  const TensorSchema stored = MakeSchema(4, 5, 1);
  const std::vector<uint8_t> img = {0,  1,  2,  3,  4,   //
                                    10, 11, 12, 13, 14,  //
                                    20, 21, 22, 23, 24,  //
                                    30, 31, 32, 33, 37};
  std::vector<uint8_t> out(4);
  ResizeCropArea(img.data(), stored, CropBox{0, 0, 4, 5}, 2, 2, false, out.data());
  // (0+1+2+10+11+12)/6 = 6; (2+3+4+12+13+14)/6 = 8; (20+21+22+30+31+32)/6 = 26;
  // (22+23+24+32+33+37)/6 = 28.5, rounded half to even: 28.
  EXPECT_EQ(out, (std::vector<uint8_t>{6, 8, 26, 28}));
  ResizeCropArea(img.data(), stored, CropBox{0, 0, 4, 5}, 2, 2, true, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{8, 6, 28, 26})) << "flip mirrors the output";
  // float32: the same means, unrounded; CHW with two channels: each plane on its own.
  const std::vector<float> imgf(img.begin(), img.end());
  std::vector<float> outf(4);
  ResizeCropArea(reinterpret_cast<const uint8_t*>(imgf.data()),
                 MakeSchema(4, 5, 1, Layout::kHWC, DType::kFloat32), CropBox{0, 0, 4, 5}, 2, 2,
                 false, reinterpret_cast<uint8_t*>(outf.data()));
  EXPECT_EQ(outf, (std::vector<float>{6, 8, 26, 28.5f}));
  std::vector<uint8_t> planes(img);
  for (uint8_t v : img) planes.push_back(static_cast<uint8_t>(255 - v));
  std::vector<uint8_t> out2(8);
  ResizeCropArea(planes.data(), MakeSchema(4, 5, 2, Layout::kCHW), CropBox{0, 0, 4, 5}, 2, 2, false,
                 out2.data());
  // 255 - 28.5 = 226.5 -> 226 (half to even).
  EXPECT_EQ(out2, (std::vector<uint8_t>{6, 8, 26, 28, 249, 247, 229, 226}));
  // A box: rows 1-2, columns 3-4, to 1 x 1: (13+14+23+24)/4 = 18.5 -> 18.
  ResizeCropArea(img.data(), stored, CropBox{1, 3, 2, 2}, 1, 1, false, out.data());
  EXPECT_EQ(out[0], 18);
  // Through DrawAugmentParams and ApplyAugment: the area option reaches the resize (the drawn
  // box replaced by the whole image, whose result is known).
  AugmentOptions o = Rrc(2, 2);
  o.interpolation = ResizeInterpolation::kArea;
  AugmentParams p = DrawAugmentParams(stored, o, 1, 0, 0);
  EXPECT_TRUE(p.area);
  p.top = p.left = 0;
  p.box_height = 4;
  p.box_width = 5;
  ApplyAugment(img.data(), stored, p, *AugmentedSchema(stored, o), out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{6, 8, 26, 28}));
  EXPECT_FALSE(DrawAugmentParams(stored, Rrc(2, 2), 1, 0, 0).area);
  AugmentOptions bad = o;
  bad.interpolation = static_cast<ResizeInterpolation>(7);
  EXPECT_EQ(AugmentedSchema(stored, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(ResizedCropTest, DigestTellsAreaFromBilinearAndKeepsTheBilinearValue) {
  AugmentOptions o = Rrc(8, 8);
  const uint32_t bilinear = ResizedCropDigest(o);
  const double v[4] = {o.scale_min, o.scale_max, o.ratio_min, o.ratio_max};
  EXPECT_EQ(bilinear, static_cast<uint32_t>(Xxh3(v, sizeof(v)))) << "older states' digest";
  o.interpolation = ResizeInterpolation::kArea;
  EXPECT_NE(ResizedCropDigest(o), bilinear);
}

// Area against torch.nn.functional.interpolate(mode="area") on float32 of the same pixels,
// rounded half to even (torch.round), for shrinking boxes (2x, 3x, non-dividing sizes) and a
// mild upsample, both layouts' pixel order; skipped without torch.
TEST(ResizedCropTest, AreaMatchesTorchInterpolateArea) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 has no torch";
  }
  TempDir dir;
  constexpr uint32_t kH = 120, kW = 160, kOh = 28, kOw = 36;
  const std::vector<uint8_t> img = SmoothImage(kH, kW, 3);
  const std::vector<CropBox> boxes = {
      {0, 0, kH, kW}, {10, 20, 56, 72}, {5, 7, 100, 130}, {50, 60, 20, 30}, {1, 2, 117, 11}};
  std::ofstream(dir / "in.raw", std::ios::binary)
      .write(reinterpret_cast<const char*>(img.data()), static_cast<std::streamsize>(img.size()));
  std::ofstream py(dir / "area.py");
  py << "import sys, numpy as np, torch\n"
        "import torch.nn.functional as F\n"
        "img = torch.from_numpy(np.fromfile(sys.argv[1], np.uint8).reshape("
     << kH << "," << kW << ",3)).permute(2, 0, 1).float()\nout = []\n";
  for (const CropBox& b : boxes) {
    py << "out.append(torch.round(F.interpolate(img[None, :, " << b.top << ":" << b.top + b.height
       << ", " << b.left << ":" << b.left + b.width << "], size=(" << kOh << ", " << kOw
       << "), mode='area'))[0].to(torch.uint8).permute(1, 2, 0).numpy())\n";
  }
  py << "np.concatenate([o.reshape(-1) for o in out]).tofile(sys.argv[2])\n";
  py.close();
  const std::string cmd = "/usr/bin/python3 " + (dir / "area.py") + " " + (dir / "in.raw") + " " +
                          (dir / "out.raw") + " 2>" + (dir / "err.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "torch script failed, see " << (dir / "err.txt");
  std::ifstream in(dir / "out.raw", std::ios::binary);
  const std::vector<uint8_t> ref(std::istreambuf_iterator<char>(in), {});
  const size_t out_bytes = size_t{kOh} * kOw * 3;
  ASSERT_EQ(ref.size(), out_bytes * boxes.size());
  const TensorSchema stored = MakeSchema(kH, kW, 3);
  std::vector<uint8_t> ours(out_bytes);
  int max_diff = 0;
  size_t differing = 0;
  for (size_t k = 0; k < boxes.size(); ++k) {
    ResizeCropArea(img.data(), stored, boxes[k], kOh, kOw, false, ours.data());
    for (size_t i = 0; i < out_bytes; ++i) {
      const int d = std::abs(int{ours[i]} - int{ref[k * out_bytes + i]});
      max_diff = std::max(max_diff, d);
      differing += d != 0;
    }
  }
  std::printf("area vs torch interpolate(mode='area'): max %d, %zu of %zu values differ\n",
              max_diff, differing, ref.size());
  EXPECT_LE(max_diff, 1);
  EXPECT_LE(differing, ref.size() / 1000) << "only float rounding at ties may differ";
}

}  // namespace
}  // namespace kiln
