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

// One thread per output pixel (all its channels): block (32, 8) covers 32 consecutive x of 8
// output rows; blockIdx.x walks the row in 32-pixel pieces and the rows (sample b, row y) are
// grid-strided over blockIdx.y. A warp reads 32 neighbouring pixels of one input row (32 x
// channels consecutive bytes) and writes 32 consecutive elements of each channel plane, so both
// sides are coalesced; each input byte is loaded once. Per pixel: one 64-bit division (row to
// sample and y) and 32-bit offsets inside the row; the row bases are 64-bit, so batches over
// 2^32 elements index correctly. With a resize box (box_height != 0) each thread reads the four
// neighbours of its source point in the box instead (rows ty.i0 and ty.i1, columns tx.i0/i1).
// params: [n][kParamWords] uint32 {top, left, flip, box_height, box_width}, or null for no crop
// and no flip. box_height != 0: the box (top, left, box_height, box_width) is resized bilinearly
// to out_h x out_w first (RandomResizedCrop / center crop), as ResizeCropBilinear.
constexpr uint32_t kBlockX = 32;
constexpr uint32_t kBlockY = 8;
constexpr uint32_t kParamWords = 5;

// One bilinear tap of torch's align_corners=False: MakeTaps in reader/augmenter.cc for output
// coordinate d, operation for operation (scale = in / out, src = scale * (d + 0.5) - 0.5
// clamped to >= 0; each a float32 operation rounded to nearest even, never fused).
struct Tap {
  uint32_t i0, i1;
  float w0, w1;
};
__device__ __forceinline__ Tap BilinearTap(uint32_t in_size, uint32_t out_size, uint32_t d) {
  const float scale = __fdiv_rn(static_cast<float>(in_size), static_cast<float>(out_size));
  float src = __fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(d), 0.5f)), 0.5f);
  if (src < 0.f) src = 0.f;
  Tap t;
  t.i0 = static_cast<uint32_t>(src);
  t.i1 = t.i0 + (t.i0 < in_size - 1 ? 1u : 0u);
  t.w1 = __fsub_rn(src, static_cast<float>(t.i0));
  t.w0 = __fsub_rn(1.0f, t.w1);
  return t;
}

// w0 * a + w1 * b: two products and a sum, each rounded (the CPU's -ffp-contract=off form).
__device__ __forceinline__ float Lerp(float w0, float a, float w1, float b) {
  return __fadd_rn(__fmul_rn(w0, a), __fmul_rn(w1, b));
}

// The CPU's uint8 store of a resized value: round half to even by adding and subtracting 2^23
// (RoundHalfEvenSmall), then int -> uint8 as static_cast does; returned as the float the
// normalisation reads.
__device__ __forceinline__ float StoreU8(float v) {
  const float r = __fsub_rn(__fadd_rn(v, 8388608.0f), 8388608.0f);
  return static_cast<float>(static_cast<uint8_t>(static_cast<int>(r)));
}

template <typename T>
__global__ void NormalizeCropFlipKernel(const uint8_t* __restrict__ in, uint32_t in_h,
                                        uint32_t in_w, uint32_t channels,
                                        const uint32_t* __restrict__ params, uint32_t out_h,
                                        uint32_t out_w, uint64_t rows, Norm norm,
                                        T* __restrict__ out) {
  const uint32_t x = blockIdx.x * kBlockX + threadIdx.x;
  if (x >= out_w) return;
  const uint64_t plane = uint64_t{out_h} * out_w;
  for (uint64_t row = uint64_t{blockIdx.y} * kBlockY + threadIdx.y; row < rows;
       row += uint64_t{gridDim.y} * kBlockY) {
    const uint64_t b = row / out_h;
    const uint32_t y = static_cast<uint32_t>(row - b * out_h);
    uint32_t top = 0, left = 0, flip = 0, box_h = 0, box_w = 0;
    if (params != nullptr) {
      const uint32_t* p = params + kParamWords * b;
      top = p[0];
      left = p[1];
      flip = p[2];
      box_h = p[3];
      box_w = p[4];
    }
    const uint32_t sx = flip ? out_w - 1 - x : x;
    T* dst = out + b * channels * plane + uint64_t{y} * out_w + x;
    if (box_h != 0) {
      // Horizontal pass on box rows ty.i0 and ty.i1, then vertical, then the uint8 rounding:
      // the values ResizeCropBilinear stores (output pixel x takes horizontal tap sx when
      // mirrored, as the CPU writes tap x to ow - 1 - x).
      const Tap tx = BilinearTap(box_w, out_w, sx);
      const Tap ty = BilinearTap(box_h, out_h, y);
      const uint8_t* row0 = in + ((b * in_h + top + ty.i0) * in_w + left) * channels;
      const uint8_t* row1 = in + ((b * in_h + top + ty.i1) * in_w + left) * channels;
      const uint32_t a0 = tx.i0 * channels, a1 = tx.i1 * channels;
      for (uint32_t ch = 0; ch < channels; ++ch) {
        const float h0 = Lerp(tx.w0, static_cast<float>(row0[a0 + ch]), tx.w1,
                              static_cast<float>(row0[a1 + ch]));
        const float h1 = Lerp(tx.w0, static_cast<float>(row1[a0 + ch]), tx.w1,
                              static_cast<float>(row1[a1 + ch]));
        const float v = StoreU8(Lerp(ty.w0, h0, ty.w1, h1));
        const float scaled = __fmul_rn(v, kNormalizeScale);
        dst[ch * plane] = FromFloat<T>(__fdiv_rn(__fsub_rn(scaled, norm.mean[ch]), norm.std[ch]));
      }
      continue;
    }
    const uint8_t* src = in + ((b * in_h + top + y) * in_w + left + sx) * channels;
    for (uint32_t ch = 0; ch < channels; ++ch) {
      // The same three IEEE operations as NormalizeSampleOnHost, each rounded to nearest even
      // (the _rn intrinsics are never contracted into an FMA, whatever --fmad says).
      const float scaled = __fmul_rn(static_cast<float>(src[ch]), kNormalizeScale);
      dst[ch * plane] = FromFloat<T>(__fdiv_rn(__fsub_rn(scaled, norm.mean[ch]), norm.std[ch]));
    }
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
  KILN_ASSIGN_OR_RETURN(
      k->params_, DeviceBuffer::Allocate(size_t{max_batch_size} * kParamWords * sizeof(uint32_t)));
  // Pinned staging, so the parameter copy is truly asynchronous (a pageable source may make
  // the driver synchronise with the stream first: CUDA Runtime API, "API synchronization
  // behavior", memcpy). Two slots alternate; a slot is refilled only after its last copy
  // completed (its event; two calls back, long done in a training loop).
  const size_t slot_words = size_t{max_batch_size} * kParamWords;
  KILN_ASSIGN_OR_RETURN(
      k->host_params_,
      HostBuffer::Allocate(kParamSlots * slot_words * sizeof(uint32_t), /*pinned=*/true));
  for (auto& event : k->params_copied_) {
    KILN_ASSIGN_OR_RETURN(event, CudaEvent::Create());
  }
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
    if (params[k].box_height != 0 || params[k].box_width != 0 || params[k].area) {
      if (params[k].area || params[k].box_height == 0 || params[k].box_width == 0 ||
          uint64_t{params[k].top} + params[k].box_height > stored_.height ||
          uint64_t{params[k].left} + params[k].box_width > stored_.width) {
        return Status::InvalidArgument(
            "NormalizeKernel::RunRaw: sample " + std::to_string(k) + "'s resize box (top " +
            std::to_string(params[k].top) + ", left " + std::to_string(params[k].left) + ", " +
            std::to_string(params[k].box_height) + "x" + std::to_string(params[k].box_width) +
            (params[k].area ? ", area interpolation" : "") + ") is empty, leaves the stored " +
            std::to_string(stored_.height) + "x" + std::to_string(stored_.width) +
            " sample, or asks for the area resize (bilinear only)");
      }
      continue;
    }
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
  const uint32_t slot = next_param_slot_;
  next_param_slot_ = (slot + 1) % kParamSlots;
  if (param_slot_used_[slot]) KILN_RETURN_IF_ERROR(params_copied_[slot].Synchronize());
  uint32_t* staged = reinterpret_cast<uint32_t*>(host_params_->data()) +
                     size_t{slot} * max_batch_size_ * kParamWords;
  for (uint32_t k = 0; k < size; ++k) {
    uint32_t* w = staged + size_t{kParamWords} * k;
    w[0] = params[k].top;
    w[1] = params[k].left;
    w[2] = params[k].flip ? 1u : 0u;
    w[3] = params[k].box_height;
    w[4] = params[k].box_width;
  }
  KILN_RETURN_IF_ERROR(CudaCopyToDeviceAsync(
      params_.data(), staged, size_t{size} * kParamWords * sizeof(uint32_t), stream));
  KILN_RETURN_IF_ERROR(params_copied_[slot].Record(stream));
  param_slot_used_[slot] = true;
  Norm norm{};
  for (uint32_t c = 0; c < kMaxNormalizeChannels; ++c) {
    norm.mean[c] = options_.mean[c];
    norm.std[c] = options_.std[c];
  }
  const uint64_t rows = uint64_t{size} * out_schema_.height;
  const dim3 threads(kBlockX, kBlockY);
  const dim3 blocks(
      (out_schema_.width + kBlockX - 1) / kBlockX,
      static_cast<uint32_t>(std::min<uint64_t>((rows + kBlockY - 1) / kBlockY, 65535)));
  const auto* in = static_cast<const uint8_t*>(device_in);
  const auto* p = static_cast<const uint32_t*>(params_.data());
  if (options_.out_dtype == DType::kFloat16) {
    NormalizeCropFlipKernel<__half><<<blocks, threads, 0, stream>>>(
        in, stored_.height, stored_.width, stored_.channels, p, out_schema_.height,
        out_schema_.width, rows, norm, static_cast<__half*>(device_out));
  } else {
    NormalizeCropFlipKernel<float><<<blocks, threads, 0, stream>>>(
        in, stored_.height, stored_.width, stored_.channels, p, out_schema_.height,
        out_schema_.width, rows, norm, static_cast<float*>(device_out));
  }
  // Peek, not Get: an error left by the caller's own earlier work is not kiln's to clear.
  return CudaStatus(cudaPeekAtLastError(), "NormalizeCropFlipKernel<<<>>>");
}

}  // namespace kiln
