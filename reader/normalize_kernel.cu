// The fused normalise / crop / flip kernel (see normalize_kernel.h for the contract).
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <utility>

#include "reader/normalize_kernel.h"

namespace kiln {

namespace {

struct Norm {
  float mean[kMaxNormalizeChannels];
  float std[kMaxNormalizeChannels];
};

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// One thread per output element, grid-stride; consecutive threads write consecutive x of one
// output row (coalesced writes; reads stride by `channels` bytes, cached).
// params: [n][3] uint32 {top, left, flip}, or null for no crop and no flip.
template <typename T>
__global__ void NormalizeCropFlipKernel(const uint8_t* __restrict__ in, uint32_t in_h,
                                        uint32_t in_w, uint32_t channels,
                                        const uint32_t* __restrict__ params, uint32_t out_h,
                                        uint32_t out_w, uint64_t total, Norm norm,
                                        T* __restrict__ out) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t x = static_cast<uint32_t>(i % out_w);
    uint64_t r = i / out_w;
    const uint32_t y = static_cast<uint32_t>(r % out_h);
    r /= out_h;
    const uint32_t ch = static_cast<uint32_t>(r % channels);
    const uint64_t b = r / channels;
    uint32_t top = 0, left = 0, flip = 0;
    if (params != nullptr) {
      top = params[3 * b];
      left = params[3 * b + 1];
      flip = params[3 * b + 2];
    }
    const uint32_t sx = flip ? out_w - 1 - x : x;
    const uint8_t v = in[((b * in_h + top + y) * in_w + left + sx) * channels + ch];
    // The same three IEEE operations as NormalizeSampleOnHost, each rounded to nearest even
    // (the _rn intrinsics are never contracted into an FMA, whatever --fmad says).
    const float scaled = __fmul_rn(static_cast<float>(v), kNormalizeScale);
    out[i] = FromFloat<T>(__fdiv_rn(__fsub_rn(scaled, norm.mean[ch]), norm.std[ch]));
  }
}

}  // namespace

Result<std::unique_ptr<NormalizeKernel>> NormalizeKernel::Create(const TensorSchema& stored,
                                                                 const AugmentOptions& augment,
                                                                 const NormalizeOptions& options,
                                                                 uint32_t max_batch_size,
                                                                 uint64_t seed) {
  KILN_ASSIGN_OR_RETURN(TensorSchema out_schema, NormalizedSchema(stored, augment, options));
  if (max_batch_size == 0) return Status::InvalidArgument("NormalizeKernel: max_batch_size is 0");
  std::unique_ptr<NormalizeKernel> k(new NormalizeKernel());
  k->stored_ = stored;
  k->out_schema_ = out_schema;
  k->augment_ = augment;
  k->options_ = options;
  k->max_batch_size_ = max_batch_size;
  k->seed_ = seed;
  KILN_ASSIGN_OR_RETURN(k->params_,
                        DeviceBuffer::Allocate(size_t{max_batch_size} * 3 * sizeof(uint32_t)));
  k->host_params_.resize(size_t{max_batch_size} * 3);
  return std::move(k);  // nvcc's front end does not apply the implicit move here
}

NormalizeKernel::~NormalizeKernel() = default;

Status NormalizeKernel::Run(const Batch& batch, void* device_out, cudaStream_t stream) {
  if (batch.device_data == nullptr) {
    return Status::InvalidArgument("NormalizeKernel::Run: batch " + std::to_string(batch.index) +
                                   " has no device copy");
  }
  if (!(batch.schema == stored_)) {
    return Status::InvalidArgument(
        "NormalizeKernel::Run: the batch's sample schema is not the "
        "one the kernel was created for");
  }
  if (batch.size > max_batch_size_) {
    return Status::InvalidArgument("NormalizeKernel::Run: batch of " + std::to_string(batch.size) +
                                   " samples exceeds max_batch_size " +
                                   std::to_string(max_batch_size_));
  }
  CudaDeviceGuard guard(batch.device);
  KILN_RETURN_IF_ERROR(guard.status());
  KILN_RETURN_IF_ERROR(batch.WaitOn(stream));  // adds `stream`; never replaces an earlier one
  std::vector<AugmentParams> params(batch.size);
  for (uint32_t k = 0; k < batch.size; ++k) {
    params[k] = DrawAugmentParams(stored_, augment_, seed_, batch.epoch, batch.sample_indices[k]);
  }
  return RunRaw(batch.device_data, batch.size, params.data(), device_out, stream);
}

Status NormalizeKernel::RunRaw(const void* device_in, uint32_t size, const AugmentParams* params,
                               void* device_out, cudaStream_t stream) {
  if (size > max_batch_size_) {
    return Status::InvalidArgument("NormalizeKernel::RunRaw: " + std::to_string(size) +
                                   " samples exceed max_batch_size " +
                                   std::to_string(max_batch_size_));
  }
  if (size == 0) return Status::Ok();
  for (uint32_t k = 0; k < size; ++k) {
    if (uint64_t{params[k].top} + out_schema_.height > stored_.height ||
        uint64_t{params[k].left} + out_schema_.width > stored_.width) {
      return Status::InvalidArgument(
          "NormalizeKernel::RunRaw: sample " + std::to_string(k) + "'s crop at (top " +
          std::to_string(params[k].top) + ", left " + std::to_string(params[k].left) + ") of " +
          std::to_string(out_schema_.height) + "x" + std::to_string(out_schema_.width) +
          " leaves the stored " + std::to_string(stored_.height) + "x" +
          std::to_string(stored_.width) + " sample");
    }
  }
  for (uint32_t k = 0; k < size; ++k) {
    host_params_[3 * k] = params[k].top;
    host_params_[3 * k + 1] = params[k].left;
    host_params_[3 * k + 2] = params[k].flip ? 1u : 0u;
  }
  // Pageable source: the call returns once the bytes are staged, so host_params_ may be reused.
  KILN_RETURN_IF_ERROR(CudaCopyToDeviceAsync(params_.data(), host_params_.data(),
                                             size_t{size} * 3 * sizeof(uint32_t), stream));
  Norm norm{};
  for (uint32_t c = 0; c < kMaxNormalizeChannels; ++c) {
    norm.mean[c] = options_.mean[c];
    norm.std[c] = options_.std[c];
  }
  const uint64_t total =
      uint64_t{size} * out_schema_.channels * out_schema_.height * out_schema_.width;
  constexpr uint32_t kThreads = 256;
  const uint32_t blocks =
      static_cast<uint32_t>(std::min<uint64_t>((total + kThreads - 1) / kThreads, 65535));
  const auto* in = static_cast<const uint8_t*>(device_in);
  const auto* p = static_cast<const uint32_t*>(params_.data());
  if (options_.out_dtype == DType::kFloat16) {
    NormalizeCropFlipKernel<__half><<<blocks, kThreads, 0, stream>>>(
        in, stored_.height, stored_.width, stored_.channels, p, out_schema_.height,
        out_schema_.width, total, norm, static_cast<__half*>(device_out));
  } else {
    NormalizeCropFlipKernel<float><<<blocks, kThreads, 0, stream>>>(
        in, stored_.height, stored_.width, stored_.channels, p, out_schema_.height,
        out_schema_.width, total, norm, static_cast<float*>(device_out));
  }
  // Peek, not Get: an error left by the caller's own earlier work is not kiln's to clear.
  return CudaStatus(cudaPeekAtLastError(), "NormalizeCropFlipKernel<<<>>>");
}

}  // namespace kiln
