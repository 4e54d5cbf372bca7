// The parts of NormalizeKernel that need no GPU compiler: the output schema, the CPU reference,
// and (in builds without nvcc) the stub. The kernel itself is in normalize_kernel.cu.
#include "reader/normalize_kernel.h"

#include <cmath>
#include <cstring>
#include <string>

namespace kiln {

Result<TensorSchema> NormalizedSchema(const TensorSchema& stored, const AugmentOptions& augment,
                                      const NormalizeOptions& options) {
  if (stored.dtype != DType::kUint8 || stored.layout != Layout::kHWC) {
    return Status::InvalidArgument("the normalise kernel reads uint8 HWC samples");
  }
  if (augment.resized_crop() && augment.interpolation != ResizeInterpolation::kBilinear) {
    return Status::NotSupported(
        "the normalise kernel does RandomResizedCrop with bilinear interpolation only: let the "
        "loader do the area resize on the CPU (loader augment options) and give the kernel no "
        "crop");
  }
  if (stored.channels < 1 || stored.channels > kMaxNormalizeChannels) {
    return Status::InvalidArgument("the normalise kernel takes 1 to " +
                                   std::to_string(kMaxNormalizeChannels) + " channels, not " +
                                   std::to_string(stored.channels));
  }
  if (options.out_dtype != DType::kFloat32 && options.out_dtype != DType::kFloat16) {
    return Status::InvalidArgument("the normalise kernel writes float32 or float16");
  }
  for (uint32_t c = 0; c < stored.channels; ++c) {
    if (options.std[c] == 0.f || !std::isfinite(options.std[c]) ||
        !std::isfinite(options.mean[c])) {
      return Status::InvalidArgument("NormalizeOptions: std[" + std::to_string(c) +
                                     "] = " + std::to_string(options.std[c]) + ", mean[" +
                                     std::to_string(c) + "] = " + std::to_string(options.mean[c]) +
                                     ": std must be finite and non-zero, mean finite");
    }
  }
  KILN_ASSIGN_OR_RETURN(TensorSchema out, AugmentedSchema(stored, augment));
  out.dtype = options.out_dtype;
  out.layout = Layout::kCHW;
  return out;
}

NormalizeOptions ImageNetNormalize() {
  NormalizeOptions o;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    o.mean[c] = mean[c];
    o.std[c] = sd[c];
  }
  return o;
}

uint16_t FloatToHalfBits(float v) {
  uint32_t x;
  std::memcpy(&x, &v, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  // 65520 (half way between 65504, the largest half, and 65536) and above: infinity.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax >= 0x38800000u) {  // a normal half (>= 2^-14)
    const uint32_t mant = ax & 0x7fffffu;
    uint32_t h = (((ax >> 23) - 112u) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | h);
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 (a tie) rounds to 0
  // A subnormal half: round(|v| * 2^24) units of 2^-24 (1024 becomes the smallest normal).
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (ax >> 23);  // in [14, 24]
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// This file is compiled with -ffp-contract=off (reader/CMakeLists.txt): the three operations
// must stay three roundings, as in the kernel.
void NormalizeSampleOnHost(const uint8_t* in, const TensorSchema& in_schema,
                           const NormalizeOptions& options, float* out) {
  const uint32_t h = in_schema.height, w = in_schema.width, c = in_schema.channels;
  for (uint32_t ch = 0; ch < c; ++ch) {
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const float v = static_cast<float>(in[(size_t{y} * w + x) * c + ch]);
        const float scaled = v * kNormalizeScale;
        const float centred = scaled - options.mean[ch];
        out[(size_t{ch} * h + y) * w + x] = centred / options.std[ch];
      }
    }
  }
}

void NormalizeSampleOnHost(const uint8_t* in, const TensorSchema& in_schema,
                           const NormalizeOptions& options, DType out_dtype, void* out) {
  if (out_dtype == DType::kFloat32) {
    NormalizeSampleOnHost(in, in_schema, options, static_cast<float*>(out));
    return;
  }
  const size_t n = size_t{in_schema.height} * in_schema.width * in_schema.channels;
  std::vector<float> tmp(n);
  NormalizeSampleOnHost(in, in_schema, options, tmp.data());
  auto* dst = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(tmp[i]);
}

void NormalizeAugmentedSampleOnHost(const uint8_t* in, const TensorSchema& stored,
                                    const AugmentParams& params, const TensorSchema& out_schema,
                                    const NormalizeOptions& options, DType out_dtype, void* out) {
  TensorSchema augmented = out_schema;
  augmented.dtype = DType::kUint8;
  augmented.layout = Layout::kHWC;
  std::vector<uint8_t> tmp(augmented.sample_bytes());
  ApplyAugment(in, stored, params, augmented, tmp.data());
  NormalizeSampleOnHost(tmp.data(), augmented, options, out_dtype, out);
}

#ifndef KILN_HAVE_CUDA_KERNELS
Result<std::unique_ptr<NormalizeKernel>> NormalizeKernel::Create(const TensorSchema&,
                                                                 const AugmentOptions&,
                                                                 const NormalizeOptions&, uint32_t,
                                                                 uint64_t) {
  return Status::NotSupported("NormalizeKernel: kiln was built without nvcc (no CUDA kernels)");
}
NormalizeKernel::~NormalizeKernel() = default;
Status NormalizeKernel::Run(const Batch&, void*, cudaStream_t) {
  return Status::NotSupported("NormalizeKernel: kiln was built without nvcc (no CUDA kernels)");
}
Status NormalizeKernel::RunRaw(const void*, uint32_t, const AugmentParams*, void*, cudaStream_t) {
  return Status::NotSupported("NormalizeKernel: kiln was built without nvcc (no CUDA kernels)");
}
#endif

}  // namespace kiln
