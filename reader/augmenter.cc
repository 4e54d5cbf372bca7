#include "reader/augmenter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KILN_AUGMENT_AVX2 1
#endif

#include "formats/xxh3.h"
#include "reader/sampler.h"

namespace kiln {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

Result<TensorSchema> ResizedCropSchema(const TensorSchema& stored, const AugmentOptions& o) {
  if (o.resize_height == 0 || o.resize_width == 0) {
    return Status::InvalidArgument("a random resized crop needs both a height and a width");
  }
  if (o.crop_height != 0 || o.crop_width != 0) {
    return Status::InvalidArgument(
        "a random resized crop and a plain random crop exclude each other");
  }
  if (!(o.scale_min > 0 && o.scale_min <= o.scale_max && o.scale_max <= 1.0)) {
    return Status::InvalidArgument("random resized crop scale (" + std::to_string(o.scale_min) +
                                   ", " + std::to_string(o.scale_max) +
                                   ") must satisfy 0 < min <= max <= 1");
  }
  if (!(o.ratio_min > 0 && o.ratio_min <= o.ratio_max && std::isfinite(o.ratio_max))) {
    return Status::InvalidArgument("random resized crop ratio (" + std::to_string(o.ratio_min) +
                                   ", " + std::to_string(o.ratio_max) +
                                   ") must satisfy 0 < min <= max");
  }
  if (o.interpolation != ResizeInterpolation::kBilinear &&
      o.interpolation != ResizeInterpolation::kArea) {
    return Status::InvalidArgument("random resized crop interpolation " +
                                   std::to_string(static_cast<int>(o.interpolation)) +
                                   " is neither bilinear (0) nor area (1)");
  }
  if (stored.dtype != DType::kUint8 && stored.dtype != DType::kFloat32) {
    return Status::InvalidArgument("a random resized crop needs uint8 or float32 samples, not " +
                                   std::string(DTypeName(stored.dtype)));
  }
  TensorSchema out = stored;
  out.height = o.resize_height;
  out.width = o.resize_width;
  return out;
}

// A uniform double in [lo, hi) from 53 bits of `x`.
double Uniform(uint64_t x, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(x >> 11) * 0x1.0p-53);
}

uint32_t Below(uint64_t x, uint64_t n) {
  return static_cast<uint32_t>((static_cast<__uint128_t>(x) * n) >> 64);
}

// Python's round(): to nearest, ties to even (the default floating-point rounding mode).
int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// Per-output-coordinate source indices and weights of torch's bilinear, align_corners=False.
struct Taps {
  std::vector<uint32_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps MakeTaps(uint32_t in_size, uint32_t out_size) {
  Taps t;
  t.i0.resize(out_size);
  t.i1.resize(out_size);
  t.w0.resize(out_size);
  t.w1.resize(out_size);
  // area_pixel_compute_scale: input / output as float; source index as
  // area_pixel_compute_source_index with negative values clamped to 0.
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  for (uint32_t d = 0; d < out_size; ++d) {
    float src = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const uint32_t i0 = static_cast<uint32_t>(src);
    t.i0[d] = i0;
    t.i1[d] = i0 + (i0 < in_size - 1 ? 1 : 0);
    t.w1[d] = src - static_cast<float>(i0);
    t.w0[d] = 1.0f - t.w1[d];
  }
  return t;
}

template <typename T>
float Load(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return static_cast<float>(v);
}

// Rounds v in [0, 2^23) to the nearest integer, ties to even, as std::nearbyint does in the
// default rounding mode: adding 2^23 leaves no fraction bits, so the addition itself rounds
// (IEEE 754 binary32 round-to-nearest-even). Unlike nearbyintf, which without SSE4.1 is a
// library call per value, this vectorises. Bilinear weights are >= 0 and sum to 1, so resized
// uint8 values lie in [0, 255]. (Needs strict float semantics: no -ffast-math.)
inline float RoundHalfEvenSmall(float v) {
  constexpr float kShift = 8388608.0f;  // 2^23
  return (v + kShift) - kShift;
}

template <typename T>
void Store(uint8_t* p, size_t i, float v) {
  if constexpr (sizeof(T) == 1) {
    p[i] = static_cast<uint8_t>(static_cast<int>(RoundHalfEvenSmall(v)));
  } else {
    std::memcpy(p + i * sizeof(float), &v, sizeof(float));
  }
}

// The bilinear resize's rows: output row y blends box rows ty.i0[y] and ty.i1[y], which never
// decrease with y, so each box row is resampled horizontally once, into one of the two row
// buffers r0 and r1, and kept (or swapped into place) while later output rows need it.
// `horizontal(sy, dst)` resamples box row sy into dst; `vertical(y, r0, r1)` writes output row y
// from the two resampled rows.
template <typename Horizontal, typename Vertical>
inline void ForEachOutputRow(const Taps& ty, uint32_t oh, float* r0, float* r1,
                             Horizontal&& horizontal, Vertical&& vertical) {
  int64_t have0 = -1, have1 = -1;
  for (uint32_t y = 0; y < oh; ++y) {
    const int64_t y0 = ty.i0[y], y1 = ty.i1[y];
    if (have0 != y0) {
      if (have1 == y0) {
        std::swap(r0, r1);
        std::swap(have0, have1);
      } else {
        horizontal(static_cast<uint32_t>(y0), r0);
        have0 = y0;
      }
    }
    if (have1 != y1) {
      horizontal(static_cast<uint32_t>(y1), r1);
      have1 = y1;
    }
    vertical(y, static_cast<const float*>(r0), static_cast<const float*>(r1));
  }
}

// One plane-or-interleaved resize: `in` rows of `stride` elements, `c` interleaved channels
// (kC: the channel count known at compile time, so the per-pixel loop unrolls; 0: `c` at run
// time).
template <typename T, uint32_t kC>
void Resize(const uint8_t* in, size_t stride, uint32_t runtime_c, const CropBox& box, uint32_t oh,
            uint32_t ow, bool flip, uint8_t* out, float* rows) {
  const uint32_t c = kC != 0 ? kC : runtime_c;
  const Taps ty = MakeTaps(box.height, oh), tx = MakeTaps(box.width, ow);
  const size_t row = size_t{ow} * c;
  auto horizontal = [&](uint32_t sy, float* dst) {
    const size_t base = (size_t{box.top} + sy) * stride + size_t{box.left} * c;
    for (uint32_t x = 0; x < ow; ++x) {
      const size_t a = base + size_t{tx.i0[x]} * c, b = base + size_t{tx.i1[x]} * c;
      const uint32_t dx = flip ? ow - 1 - x : x;
      for (uint32_t ch = 0; ch < c; ++ch) {
        dst[size_t{dx} * c + ch] = tx.w0[x] * Load<T>(in, a + ch) + tx.w1[x] * Load<T>(in, b + ch);
      }
    }
  };
  ForEachOutputRow(ty, oh, rows, rows + row, horizontal,
                   [&](uint32_t y, const float* r0, const float* r1) {
                     const float w0 = ty.w0[y], w1 = ty.w1[y];
                     uint8_t* dst = out + size_t{y} * row * sizeof(T);
                     for (size_t i = 0; i < row; ++i) Store<T>(dst, i, w0 * r0[i] + w1 * r1[i]);
                   });
}

#ifdef KILN_AUGMENT_AVX2
// The uint8 resize with AVX2, the same arithmetic as Resize<uint8_t, kC> value for value (a
// float product per tap, one float addition, the vertical pass likewise, round half to even),
// so its outputs are bit-identical; only the loads, conversions and stores are vectorised. The
// target attribute enables AVX2 and not FMA: a fused multiply-add would round once instead of
// twice and change results. Called only when the CPU has AVX2 (ResizeCropBilinear checks).

// The horizontal pass of one resize, planned per output value in output (stored) order with the
// flip applied: value j of a resampled row (pixel j / c, channel j % c) is
// w0[j] * src[sa[j]] + w1[j] * src[sb[j]] for the box row `src`. The values go in groups of
// eight, each group in two halves of four (the two 128-bit lanes of a vector). Group g is
// "windowed" when the eight taps of each half h lie in the 16 bytes from window[2g + h] and those
// bytes lie inside the box row: two 16-byte loads then serve the whole group, and `take` holds
// the byte shuffles (32 bytes for the first taps, 32 for the second) that widen the taps to the
// eight 32-bit lanes. For 3 channels a half spans two pixels' taps, so shrinks up to about 3.3x
// are windowed. Other groups (window[2g] = kNoWindow), and the values after the last whole
// group, are computed one by one.
struct HorizontalPlan {
  static constexpr uint32_t kNoWindow = ~uint32_t{0};
  std::vector<uint32_t> sa, sb, window;
  std::vector<float> w0, w1;
  std::vector<uint8_t> take;
};

void MakeHorizontalPlan(const Taps& tx, uint32_t box_width, uint32_t ow, uint32_t c, bool flip,
                        HorizontalPlan* plan) {
  const size_t n = size_t{ow} * c, groups = n / 8, row_bytes = size_t{box_width} * c;
  plan->sa.resize(n);
  plan->sb.resize(n);
  plan->w0.resize(n);
  plan->w1.resize(n);
  for (uint32_t x = 0; x < ow; ++x) {
    const size_t dx = flip ? ow - 1 - x : x;
    for (uint32_t ch = 0; ch < c; ++ch) {
      plan->sa[dx * c + ch] = tx.i0[x] * c + ch;
      plan->sb[dx * c + ch] = tx.i1[x] * c + ch;
      plan->w0[dx * c + ch] = tx.w0[x];
      plan->w1[dx * c + ch] = tx.w1[x];
    }
  }
  plan->window.assign(2 * groups, HorizontalPlan::kNoWindow);
  plan->take.assign(groups * 64, 0x80);  // 0x80: pshufb writes a zero byte
  if (row_bytes < 16) return;            // no window fits in the box row
  for (size_t g = 0; g < groups; ++g) {
    uint32_t start[2];
    bool fits = true;
    for (size_t h = 0; h < 2; ++h) {
      uint32_t lo = ~uint32_t{0}, hi = 0;
      for (size_t e = 8 * g + 4 * h; e < 8 * g + 4 * h + 4; ++e) {
        lo = std::min({lo, plan->sa[e], plan->sb[e]});
        hi = std::max({hi, plan->sa[e], plan->sb[e]});
      }
      // The window starts at the first tap, or earlier where that would leave the box row.
      start[h] = static_cast<uint32_t>(std::min<size_t>(lo, row_bytes - 16));
      fits = fits && hi - start[h] < 16;
    }
    if (!fits) continue;
    plan->window[2 * g] = start[0];
    plan->window[2 * g + 1] = start[1];
    uint8_t* take = plan->take.data() + 64 * g;
    for (size_t e = 0; e < 8; ++e) {
      // Lane e / 4 of the 256-bit shuffle (the half's window), 32-bit element e % 4, low byte.
      const size_t at = 16 * (e / 4) + 4 * (e % 4);
      take[at] = static_cast<uint8_t>(plan->sa[8 * g + e] - start[e / 4]);
      take[32 + at] = static_cast<uint8_t>(plan->sb[8 * g + e] - start[e / 4]);
    }
  }
}

// One box row `src` through `plan` to the float row `dst` (n values). A windowed group: its two
// 16-byte windows loaded into the two 128-bit lanes, one byte shuffle per tap, eight
// conversions, products and sums, one 8-float store.
__attribute__((target("avx2"))) void HorizontalU8Avx2(const uint8_t* src,
                                                      const HorizontalPlan& plan, size_t n,
                                                      float* __restrict dst) {
  // Plain pointers, read once: the plan is thread_local, and its members reached through it
  // would be looked up again after every store.
  const uint32_t* __restrict sa = plan.sa.data();
  const uint32_t* __restrict sb = plan.sb.data();
  const uint32_t* __restrict window = plan.window.data();
  const float* __restrict w0 = plan.w0.data();
  const float* __restrict w1 = plan.w1.data();
  const uint8_t* __restrict take = plan.take.data();
  const size_t groups = n / 8;
  auto one = [&](size_t j) {
    dst[j] = w0[j] * static_cast<float>(src[sa[j]]) + w1[j] * static_cast<float>(src[sb[j]]);
  };
  for (size_t g = 0; g < groups; ++g) {
    const size_t j = 8 * g;
    if (window[2 * g] == HorizontalPlan::kNoWindow) {
      for (size_t e = j; e < j + 8; ++e) one(e);
      continue;
    }
    const __m256i bytes = _mm256_inserti128_si256(
        _mm256_castsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + window[2 * g]))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + window[2 * g + 1])), 1);
    const __m256i take_a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(take + 64 * g));
    const __m256i take_b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(take + 64 * g + 32));
    const __m256 fa = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, take_a));
    const __m256 fb = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, take_b));
    _mm256_storeu_ps(dst + j, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(w0 + j), fa),
                                            _mm256_mul_ps(_mm256_loadu_ps(w1 + j), fb)));
  }
  for (size_t e = 8 * groups; e < n; ++e) one(e);
}

// Eight values of the vertical pass, rounded to 32-bit integers.
__attribute__((target("avx2"))) inline __m256i VerticalEightAvx2(const float* r0, const float* r1,
                                                                 __m256 vw0, __m256 vw1) {
  return _mm256_cvtps_epi32(_mm256_add_ps(_mm256_mul_ps(vw0, _mm256_loadu_ps(r0)),
                                          _mm256_mul_ps(vw1, _mm256_loadu_ps(r1))));
}

// Vertical pass: out[i] = round_half_even(w0 * r0[i] + w1 * r1[i]) as uint8, 32 values a step
// (then 16, then one by one).
// cvtps2dq rounds to nearest even (the default MXCSR mode), as the 2^23 addition does.
__attribute__((target("avx2"))) void VerticalU8Avx2(const float* r0, const float* r1, float w0,
                                                    float w1, size_t n, uint8_t* out) {
  const __m256 vw0 = _mm256_set1_ps(w0), vw1 = _mm256_set1_ps(w1);
  size_t i = 0;
  // 32 values a step: two 32 -> 16-bit packs, one 16 -> 8-bit pack and one lane fix per 32.
  for (; i + 32 <= n; i += 32) {
    // packus works within 128-bit lanes: a = [0-3 8-11 | 4-7 12-15], b likewise for 16-31;
    // packing those gives [0-3 8-11 16-19 24-27 | 4-7 12-15 20-23 28-31] in 32-bit units.
    const __m256i a = _mm256_packus_epi32(VerticalEightAvx2(r0 + i, r1 + i, vw0, vw1),
                                          VerticalEightAvx2(r0 + i + 8, r1 + i + 8, vw0, vw1));
    const __m256i b = _mm256_packus_epi32(VerticalEightAvx2(r0 + i + 16, r1 + i + 16, vw0, vw1),
                                          VerticalEightAvx2(r0 + i + 24, r1 + i + 24, vw0, vw1));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, b),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bytes);
  }
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = _mm256_add_ps(_mm256_mul_ps(vw0, _mm256_loadu_ps(r0 + i)),
                                    _mm256_mul_ps(vw1, _mm256_loadu_ps(r1 + i)));
    const __m256 hi = _mm256_add_ps(_mm256_mul_ps(vw0, _mm256_loadu_ps(r0 + i + 8)),
                                    _mm256_mul_ps(vw1, _mm256_loadu_ps(r1 + i + 8)));
    // packus works within 128-bit lanes: [lo0-3 hi0-3 | lo4-7 hi4-7], reordered to lo, hi.
    const __m256i w16 = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(_mm256_cvtps_epi32(lo), _mm256_cvtps_epi32(hi)), 0xD8);
    const __m128i b8 =
        _mm_packus_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), b8);
  }
  for (; i < n; ++i) {
    out[i] = static_cast<uint8_t>(static_cast<int>(RoundHalfEvenSmall(w0 * r0[i] + w1 * r1[i])));
  }
}

__attribute__((target("avx2"))) void ResizeU8Avx2(const uint8_t* in, size_t stride, uint32_t c,
                                                  const CropBox& box, uint32_t oh, uint32_t ow,
                                                  bool flip, uint8_t* out, float* rows) {
  const Taps ty = MakeTaps(box.height, oh), tx = MakeTaps(box.width, ow);
  thread_local HorizontalPlan plan;
  MakeHorizontalPlan(tx, box.width, ow, c, flip, &plan);
  const size_t row = size_t{ow} * c;
  auto horizontal = [&](uint32_t sy, float* dst) {
    const uint8_t* src = in + (size_t{box.top} + sy) * stride + size_t{box.left} * c;
    HorizontalU8Avx2(src, plan, row, dst);
  };
  ForEachOutputRow(ty, oh, rows, rows + row, horizontal,
                   [&](uint32_t y, const float* r0, const float* r1) {
                     VerticalU8Avx2(r0, r1, ty.w0[y], ty.w1[y], row, out + size_t{y} * row);
                   });
}

bool HaveAvx2() {
  // __builtin_cpu_init first: the CPU model may not be filled in yet when this runs during
  // static initialisation. __builtin_cpu_supports also checks that the OS saves the AVX state.
  static const bool have = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") != 0);
  return have;
}
#endif  // KILN_AUGMENT_AVX2

// adaptive_avg_pool2d's window of output index i: [start, end) of an axis of in_size, in
// integers (exact).
uint32_t AreaStart(uint64_t i, uint64_t in_size, uint64_t out_size) {
  return static_cast<uint32_t>(i * in_size / out_size);
}
uint32_t AreaEnd(uint64_t i, uint64_t in_size, uint64_t out_size) {
  return static_cast<uint32_t>(((i + 1) * in_size + out_size - 1) / out_size);
}

// The area resize of one plane-or-interleaved image (`stride` elements a row, `c` interleaved
// channels), separably: per output row, the window's source rows added column by column (a
// loop the compiler vectorises), then each output column's window of those sums added, then
// every value divided by the window's height and width (vectorised too: two divisions per value
// were most of the time). uint8 sums are integers (exact, so the order does not matter); float32
// sums run top to bottom within a column, then left to right.
template <typename T>
void AreaPlane(const uint8_t* in, size_t stride, uint32_t c, const CropBox& box, uint32_t oh,
               uint32_t ow, bool flip, uint8_t* out) {
  using Acc = std::conditional_t<sizeof(T) == 1, uint32_t, float>;
  const size_t row = size_t{ow} * c, box_row = size_t{box.width} * c;
  // Per output value in output order (flip applied): the first box column of its window (times
  // c, plus its channel) and the window's width.
  std::vector<uint32_t> first(row), width(row);
  std::vector<float> kw(row), sum(row);
  for (uint32_t x = 0; x < ow; ++x) {
    const uint32_t dx = flip ? ow - 1 - x : x;
    const uint32_t x0 = AreaStart(x, box.width, ow), x1 = AreaEnd(x, box.width, ow);
    for (uint32_t ch = 0; ch < c; ++ch) {
      first[size_t{dx} * c + ch] = x0 * c + ch;
      width[size_t{dx} * c + ch] = x1 - x0;
      kw[size_t{dx} * c + ch] = static_cast<float>(x1 - x0);
    }
  }
  std::vector<Acc> columns(box_row);
  for (uint32_t y = 0; y < oh; ++y) {
    const uint32_t y0 = box.top + AreaStart(y, box.height, oh);
    const uint32_t y1 = box.top + AreaEnd(y, box.height, oh);
    std::fill(columns.begin(), columns.end(), Acc{0});
    // uint32 sums: a window of at most 2^32 / 255 pixels (16,843,009, a 4,104 x 4,104 box).
    for (uint32_t sy = y0; sy < y1; ++sy) {
      const uint8_t* r = in + (size_t{sy} * stride + size_t{box.left} * c) * sizeof(T);
      if constexpr (sizeof(T) == 1) {
        for (size_t i = 0; i < box_row; ++i) columns[i] += r[i];
      } else {
        for (size_t i = 0; i < box_row; ++i) columns[i] += Load<float>(r, i);
      }
    }
    for (size_t i = 0; i < row; ++i) {
      Acc s{0};
      for (uint32_t k = 0; k < width[i]; ++k) s += columns[first[i] + size_t{k} * c];
      sum[i] = static_cast<float>(s);
    }
    const float kh = static_cast<float>(y1 - y0);
    uint8_t* dst = out + size_t{y} * row * sizeof(T);
    for (size_t i = 0; i < row; ++i) Store<T>(dst, i, sum[i] / kh / kw[i]);
  }
}

// Writes the `n` elements of `bytes` bytes each at `src` to `dst` in reverse order. Common sizes
// get a fixed-size copy (a few moves) instead of a memcpy call per element.
template <size_t kBytes>
void MirrorFixed(const uint8_t* src, uint8_t* dst, uint32_t n) {
  for (uint32_t x = 0; x < n; ++x) {
    std::memcpy(dst + size_t{x} * kBytes, src + size_t{n - 1 - x} * kBytes, kBytes);
  }
}

void MirrorRow(const uint8_t* src, uint8_t* dst, uint32_t n, size_t bytes) {
  switch (bytes) {
    case 1:
      return MirrorFixed<1>(src, dst, n);
    case 2:
      return MirrorFixed<2>(src, dst, n);
    case 3:
      return MirrorFixed<3>(src, dst, n);
    case 4:
      return MirrorFixed<4>(src, dst, n);
    case 6:
      return MirrorFixed<6>(src, dst, n);
    case 12:
      return MirrorFixed<12>(src, dst, n);
    default:
      for (uint32_t x = 0; x < n; ++x) {
        std::memcpy(dst + x * bytes, src + (n - 1 - x) * bytes, bytes);
      }
  }
}

}  // namespace

Result<TensorSchema> AugmentedSchema(const TensorSchema& stored, const AugmentOptions& options) {
  if (options.center_crop()) {
    const AugmentOptions& o = options;
    if (o.center_crop_height == 0 || o.center_crop_width == 0) {
      return Status::InvalidArgument("a center crop needs both a height and a width");
    }
    if (o.resized_crop() || o.crop_height != 0 || o.crop_width != 0) {
      return Status::InvalidArgument(
          "a center crop excludes a random resized crop and a plain random crop");
    }
    if (!(o.center_crop_ratio > 0 && o.center_crop_ratio <= 1.0)) {
      return Status::InvalidArgument("center crop ratio " + std::to_string(o.center_crop_ratio) +
                                     " must be in (0, 1]");
    }
    if (stored.dtype != DType::kUint8 && stored.dtype != DType::kFloat32) {
      return Status::InvalidArgument("a center crop needs uint8 or float32 samples, not " +
                                     std::string(DTypeName(stored.dtype)));
    }
    TensorSchema out = stored;
    out.height = o.center_crop_height;
    out.width = o.center_crop_width;
    return out;
  }
  if (options.resized_crop()) return ResizedCropSchema(stored, options);
  TensorSchema out = stored;
  if (options.crop_height == 0 && options.crop_width == 0) return out;
  if (options.crop_height == 0 || options.crop_width == 0) {
    return Status::InvalidArgument("a random crop needs both a height and a width");
  }
  if (options.crop_height > stored.height || options.crop_width > stored.width) {
    return Status::InvalidArgument(
        "crop " + std::to_string(options.crop_height) + "x" + std::to_string(options.crop_width) +
        " is larger than the stored samples, " + std::to_string(stored.height) + "x" +
        std::to_string(stored.width));
  }
  out.height = options.crop_height;
  out.width = options.crop_width;
  return out;
}

AugmentParams DrawAugmentParams(const TensorSchema& stored, const AugmentOptions& options,
                                uint64_t seed, uint64_t epoch, uint64_t sample) {
  // Three independent 64-bit draws from one hash chain of (seed, epoch, sample).
  const uint64_t h0 = SplitMix64Mix(seed ^ SplitMix64Mix(epoch ^ SplitMix64Mix(sample + 1)));
  const uint64_t h1 = SplitMix64Mix(h0 + kGolden);
  const uint64_t h2 = SplitMix64Mix(h1 + kGolden);
  AugmentParams p;
  if (options.resized_crop() || options.center_crop()) {
    const CropBox box = options.center_crop()
                            ? CenterCropBox(stored.height, stored.width, options)
                            : DrawResizedCropBox(stored.height, stored.width, options, h0);
    p.top = box.top;
    p.left = box.left;
    p.box_height = box.height;
    p.box_width = box.width;
    p.area = options.interpolation == ResizeInterpolation::kArea;
  }
  if (options.crop_height != 0) {
    // Multiply-shift maps a uniform 64-bit value onto [0, range) with bias below 2^-32 here.
    const uint64_t rows = stored.height - options.crop_height + 1;
    const uint64_t cols = stored.width - options.crop_width + 1;
    p.top = static_cast<uint32_t>((static_cast<__uint128_t>(h0) * rows) >> 64);
    p.left = static_cast<uint32_t>((static_cast<__uint128_t>(h1) * cols) >> 64);
  }
  p.flip = options.flip && (h2 >> 63) != 0;
  return p;
}

CropBox DrawResizedCropBox(uint32_t height, uint32_t width, const AugmentOptions& o, uint64_t h) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(o.ratio_min), log_hi = std::log(o.ratio_max);
  uint64_t x = h;
  auto next = [&x] { return x = SplitMix64Mix(x + kGolden); };
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * Uniform(next(), o.scale_min, o.scale_max);
    const double aspect = std::exp(Uniform(next(), log_lo, log_hi));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t hh = RoundHalfEven(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < hh && hh <= height) {
      CropBox b;
      b.height = static_cast<uint32_t>(hh);
      b.width = static_cast<uint32_t>(w);
      b.top = Below(next(), height - b.height + 1);
      b.left = Below(next(), width - b.width + 1);
      return b;
    }
  }
  const double in_ratio = static_cast<double>(width) / height;
  int64_t w = width, hh = height;
  if (in_ratio < o.ratio_min) {
    hh = RoundHalfEven(w / o.ratio_min);
  } else if (in_ratio > o.ratio_max) {
    w = RoundHalfEven(hh * o.ratio_max);
  }
  CropBox b;
  b.height = static_cast<uint32_t>(hh);
  b.width = static_cast<uint32_t>(w);
  b.top = static_cast<uint32_t>((height - hh) / 2);
  b.left = static_cast<uint32_t>((width - w) / 2);
  return b;
}

CropBox CenterCropBox(uint32_t height, uint32_t width, const AugmentOptions& o) {
  const double out_aspect =
      static_cast<double>(o.center_crop_width) / static_cast<double>(o.center_crop_height);
  double bh = height, bw = width;
  if (static_cast<double>(width) / height > out_aspect) {
    bw = bh * out_aspect;  // a wide image: the box spans the height
  } else {
    bh = bw / out_aspect;
  }
  const auto side = [](double v, uint32_t limit) {
    const int64_t r = RoundHalfEven(v);
    return static_cast<uint32_t>(std::clamp<int64_t>(r, 1, limit));
  };
  CropBox b;
  b.height = side(bh * o.center_crop_ratio, height);
  b.width = side(bw * o.center_crop_ratio, width);
  b.top = (height - b.height) / 2;
  b.left = (width - b.width) / 2;
  return b;
}

void ResizeCropBilinear(const uint8_t* in, const TensorSchema& stored, const CropBox& box,
                        uint32_t out_height, uint32_t out_width, bool flip, uint8_t* out,
                        float* row_scratch) {
  const bool u8 = stored.dtype == DType::kUint8;
  auto run = [&](const uint8_t* src, size_t stride, uint32_t c, uint8_t* dst) {
    auto typed = [&](auto type) {
      using T = decltype(type);
      switch (c) {
        case 1:
          return Resize<T, 1>(src, stride, c, box, out_height, out_width, flip, dst, row_scratch);
        case 3:
          return Resize<T, 3>(src, stride, c, box, out_height, out_width, flip, dst, row_scratch);
        case 4:
          return Resize<T, 4>(src, stride, c, box, out_height, out_width, flip, dst, row_scratch);
        default:
          return Resize<T, 0>(src, stride, c, box, out_height, out_width, flip, dst, row_scratch);
      }
    };
    if (u8) {
#ifdef KILN_AUGMENT_AVX2
      if (HaveAvx2())
        return ResizeU8Avx2(src, stride, c, box, out_height, out_width, flip, dst, row_scratch);
#endif
      typed(uint8_t{});
    } else {
      typed(float{});
    }
  };
  if (stored.layout == Layout::kHWC) {
    run(in, size_t{stored.width} * stored.channels, stored.channels, out);
    return;
  }
  const size_t elem = DTypeSize(stored.dtype);
  for (uint32_t ch = 0; ch < stored.channels; ++ch) {
    run(in + size_t{ch} * stored.height * stored.width * elem, stored.width, 1,
        out + size_t{ch} * out_height * out_width * elem);
  }
}

void ResizeCropArea(const uint8_t* in, const TensorSchema& stored, const CropBox& box,
                    uint32_t out_height, uint32_t out_width, bool flip, uint8_t* out) {
  const size_t elem = DTypeSize(stored.dtype);
  if (stored.layout == Layout::kHWC) {
    if (stored.dtype == DType::kUint8) {
      AreaPlane<uint8_t>(in, size_t{stored.width} * stored.channels, stored.channels, box,
                         out_height, out_width, flip, out);
    } else {
      AreaPlane<float>(in, size_t{stored.width} * stored.channels, stored.channels, box, out_height,
                       out_width, flip, out);
    }
    return;
  }
  for (uint32_t ch = 0; ch < stored.channels; ++ch) {
    const uint8_t* src = in + size_t{ch} * stored.height * stored.width * elem;
    uint8_t* dst = out + size_t{ch} * out_height * out_width * elem;
    if (stored.dtype == DType::kUint8) {
      AreaPlane<uint8_t>(src, stored.width, 1, box, out_height, out_width, flip, dst);
    } else {
      AreaPlane<float>(src, stored.width, 1, box, out_height, out_width, flip, dst);
    }
  }
}

uint32_t ResizedCropDigest(const AugmentOptions& o) {
  unsigned char bytes[4 * sizeof(double) + 1];
  const double v[4] = {o.scale_min, o.scale_max, o.ratio_min, o.ratio_max};
  std::memcpy(bytes, v, sizeof(v));
  bytes[sizeof(v)] = 1;
  const bool area = o.interpolation == ResizeInterpolation::kArea;
  return static_cast<uint32_t>(Xxh3(bytes, sizeof(v) + (area ? 1 : 0)));
}

uint32_t CenterCropDigest(const AugmentOptions& o) {
  const double v[4] = {o.center_crop_ratio, -1.0, -1.0, -1.0};
  return static_cast<uint32_t>(Xxh3(v, sizeof(v)));
}

void ApplyAugment(const uint8_t* in, const TensorSchema& stored, const AugmentParams& params,
                  const TensorSchema& out_schema, uint8_t* out) {
  if (params.box_height != 0 && params.area) {
    const CropBox box{params.top, params.left, params.box_height, params.box_width};
    ResizeCropArea(in, stored, box, out_schema.height, out_schema.width, params.flip, out);
    return;
  }
  if (params.box_height != 0) {
    thread_local std::vector<float> rows;
    rows.resize(size_t{2} * out_schema.width * stored.channels);
    const CropBox box{params.top, params.left, params.box_height, params.box_width};
    ResizeCropBilinear(in, stored, box, out_schema.height, out_schema.width, params.flip, out,
                       rows.data());
    return;
  }
  const size_t elem = DTypeSize(stored.dtype);
  const uint32_t oh = out_schema.height, ow = out_schema.width, c = stored.channels;
  if (stored.layout == Layout::kHWC) {
    const size_t pixel = elem * c;
    for (uint32_t y = 0; y < oh; ++y) {
      const uint8_t* src = in + ((size_t{params.top} + y) * stored.width + params.left) * pixel;
      uint8_t* dst = out + size_t{y} * ow * pixel;
      if (!params.flip) {
        std::memcpy(dst, src, size_t{ow} * pixel);
      } else {
        MirrorRow(src, dst, ow, pixel);
      }
    }
    return;
  }
  for (uint32_t ch = 0; ch < c; ++ch) {
    const uint8_t* plane = in + size_t{ch} * stored.height * stored.width * elem;
    uint8_t* out_plane = out + size_t{ch} * oh * ow * elem;
    for (uint32_t y = 0; y < oh; ++y) {
      const uint8_t* src = plane + ((size_t{params.top} + y) * stored.width + params.left) * elem;
      uint8_t* dst = out_plane + size_t{y} * ow * elem;
      if (!params.flip) {
        std::memcpy(dst, src, size_t{ow} * elem);
      } else {
        MirrorRow(src, dst, ow, elem);
      }
    }
  }
}

}  // namespace kiln
