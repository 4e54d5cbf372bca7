#include "reader/augmenter.h"

#include <cstring>

#include "reader/sampler.h"

namespace kiln {

Result<TensorSchema> AugmentedSchema(const TensorSchema& stored, const AugmentOptions& options) {
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
  const uint64_t h1 = SplitMix64Mix(h0 + 0x9E3779B97F4A7C15ull);
  const uint64_t h2 = SplitMix64Mix(h1 + 0x9E3779B97F4A7C15ull);
  AugmentParams p;
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

void ApplyAugment(const uint8_t* in, const TensorSchema& stored, const AugmentParams& params,
                  const TensorSchema& out_schema, uint8_t* out) {
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
        for (uint32_t x = 0; x < ow; ++x)
          std::memcpy(dst + x * pixel, src + (ow - 1 - x) * pixel, pixel);
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
        for (uint32_t x = 0; x < ow; ++x)
          std::memcpy(dst + x * elem, src + (ow - 1 - x) * elem, elem);
      }
    }
  }
}

}  // namespace kiln
