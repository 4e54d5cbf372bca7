// The parts of NormalizeKernel that need no GPU compiler: the output schema, the CPU reference,
// and (in builds without nvcc) the stub. The kernel itself is in normalize_kernel.cu.
#include "reader/normalize_kernel.h"

#include <string>

namespace kiln {

Result<TensorSchema> NormalizedSchema(const TensorSchema& stored, const AugmentOptions& augment,
                                      const NormalizeOptions& options) {
  if (stored.dtype != DType::kUint8 || stored.layout != Layout::kHWC) {
    return Status::InvalidArgument("the normalise kernel reads uint8 HWC samples");
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
    if (options.std[c] == 0.f) {
      return Status::InvalidArgument("NormalizeOptions::std[" + std::to_string(c) + "] is zero");
    }
  }
  KILN_ASSIGN_OR_RETURN(TensorSchema out, AugmentedSchema(stored, augment));
  out.dtype = options.out_dtype;
  out.layout = Layout::kCHW;
  return out;
}

void NormalizeSampleOnHost(const uint8_t* in, const TensorSchema& in_schema,
                           const NormalizeOptions& options, float* out) {
  const uint32_t h = in_schema.height, w = in_schema.width, c = in_schema.channels;
  for (uint32_t ch = 0; ch < c; ++ch) {
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const float v = static_cast<float>(in[(size_t{y} * w + x) * c + ch]);
        out[(size_t{ch} * h + y) * w + x] = (v - options.mean[ch]) / options.std[ch];
      }
    }
  }
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
