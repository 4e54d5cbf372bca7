// kiln::NormalizeKernel: the optional fused GPU step after upload. Turns a device batch of
// uint8 HWC samples into normalised float32 or float16 CHW samples, applying the random crop and
// horizontal flip of reader/augmenter.h (and its bilinear RandomResizedCrop / center crop, below)
// on the GPU:
//
//   out[b, c, y, x] = round((in[b, top + y, left + x', c] * s - mean[c]) / std[c]),
//   x' = flip ? out_width - 1 - x : x,   s = 1/255 rounded to float (0x3b808081),
//
// evaluated as three IEEE float operations in this order, each rounded to nearest even (a
// multiplication, a subtraction, a division; never fused into an FMA), then `round` to the
// output type: none for float32, round-to-nearest-even to binary16 for float16 (overflow to
// infinity, subnormals kept). mean and std are in [0, 1] units, as torchvision's Normalize after
// ToTensor (ImageNet: mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225); the Python binding's
// normalize=(mean, std) uses the same units and the same three operations. (top, left, flip) =
// DrawAugmentParams(stored, augment, seed, batch.epoch, batch.sample_indices[b]): drawn on the
// host, exactly as the CPU path draws them, and uploaded with the batch. So a loader with
// augment off followed by this kernel gives the same samples as a loader with the same
// AugmentOptions followed by NormalizeSampleOnHost: bit-identical for float32 and for float16
// (gpu_upload_test compares the bytes).
//
// RandomResizedCrop and the center crop (AugmentOptions::resize_height / center_crop_height,
// bilinear interpolation only; kArea is NotSupported): the box (top, left, box_height,
// box_width) comes from the same DrawAugmentParams on the host and is staged with the other
// per-sample parameters. Each output pixel is then ResizeCropBilinear's value, recomputed per
// thread with the CPU's float32 operations in the CPU's order (tap: scale = box / out, src =
// scale * (d + 0.5) - 0.5 clamped to >= 0, w1 = src - floor(src), w0 = 1 - w1; horizontal
// w0 * a + w1 * b on the two box rows, vertical likewise, each product and sum rounded to
// nearest even through __fmul_rn / __fadd_rn so nvcc never contracts them into an FMA), rounded
// half to even to uint8 as the CPU stores it, mirrored (output column x takes tap out_width -
// 1 - x) when flip, and normalised by the formula above. So the kernel's bytes equal
// NormalizeAugmentedSampleOnHost's (ApplyAugment, then NormalizeSampleOnHost) bit for bit, for
// float32 and float16; gpu_upload_test (FusedKernelResizedCropBitExact) asserts this on a GPU.
// Cost: each thread reads 4 pixels of the box instead of 1 and recomputes its two taps (a
// float division each); no shared memory.
//
// Build: the kernel is compiled when CMake found nvcc (KILN_HAVE_CUDA_KERNELS); otherwise
// Create returns NotSupported. NormalizedSchema, NormalizeSampleOnHost (the CPU reference) and
// FloatToHalfBits are always built.
// Ownership: a NormalizeKernel owns a small device buffer for the per-sample parameters.
// Thread safety: one thread at a time; see Run for stream ordering.
#ifndef KILN_READER_NORMALIZE_KERNEL_H_
#define KILN_READER_NORMALIZE_KERNEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "formats/status.h"
#include "formats/tensor_schema.h"
#include "reader/augmenter.h"
#include "reader/cuda_handles.h"
#include "reader/host_buffer.h"
#include "reader/loader.h"

namespace kiln {

constexpr uint32_t kMaxNormalizeChannels = 4;

struct NormalizeOptions {
  // Output element type: DType::kFloat32 or DType::kFloat16 (IEEE binary16, round to nearest
  // even). Default float32.
  DType out_dtype = DType::kFloat32;
  // Per-channel mean and standard deviation in [0, 1] units (of value / 255), for channels
  // [0, kMaxNormalizeChannels); std must be finite and non-zero. Default 0 and 1 (out = v / 255
  // rounded as above).
  float mean[kMaxNormalizeChannels] = {0.f, 0.f, 0.f, 0.f};
  float std[kMaxNormalizeChannels] = {1.f, 1.f, 1.f, 1.f};
};

// 1/255 rounded to float: the scale of the formula above.
constexpr float kNormalizeScale = 1.0f / 255.0f;

// torchvision's ImageNet statistics (mean 0.485, 0.456, 0.406; std 0.229, 0.224, 0.225), float32.
NormalizeOptions ImageNetNormalize();

// IEEE binary16 bits of `v` rounded to nearest, ties to even (overflow to +-infinity, subnormal
// results kept, NaN stays NaN with the quiet bit set): the host side of __float2half_rn.
uint16_t FloatToHalfBits(float v);

// Returns the schema of normalised samples: out_dtype, CHW, the crop size of `augment` (or the
// stored size). Errors: InvalidArgument when `stored` is not uint8 HWC with 1 to 4 channels, a
// std is zero, out_dtype is not a float type, or AugmentedSchema rejects the crop; NotSupported
// for RandomResizedCrop with ResizeInterpolation::kArea (the loader does it on the CPU).
Result<TensorSchema> NormalizedSchema(const TensorSchema& stored, const AugmentOptions& augment,
                                      const NormalizeOptions& options);

// The CPU reference: normalises one uint8 HWC sample `in` of schema `in_schema` (already
// cropped and flipped, as the loader's slots hold it) into float32 CHW `out`
// ([channels, height, width] floats), with the formula in the file comment.
void NormalizeSampleOnHost(const uint8_t* in, const TensorSchema& in_schema,
                           const NormalizeOptions& options, float* out);
// The same into `out_dtype` (float32 or float16, IEEE binary16 bits), the exact bytes the kernel
// writes for the sample: in_schema's height * width * channels elements of DTypeSize(out_dtype).
void NormalizeSampleOnHost(const uint8_t* in, const TensorSchema& in_schema,
                           const NormalizeOptions& options, DType out_dtype, void* out);

// The CPU reference of the whole fused step on one stored sample: ApplyAugment(in, stored,
// params) into a uint8 HWC sample of out_schema's height and width (the plain crop and flip,
// or the bilinear RandomResizedCrop / center crop resize with its uint8 rounding), then
// NormalizeSampleOnHost into `out_dtype`. `stored` is uint8 HWC; `out_schema` is
// NormalizedSchema's (only its height, width and channels are used); `out` holds
// out_schema.sample_bytes() bytes. Equal byte for byte to what the kernel writes for a sample
// with these params. Allocates one scratch sample per call. Thread safety: reentrant.
void NormalizeAugmentedSampleOnHost(const uint8_t* in, const TensorSchema& stored,
                                    const AugmentParams& params, const TensorSchema& out_schema,
                                    const NormalizeOptions& options, DType out_dtype, void* out);

class NormalizeKernel {
 public:
  // Prepares the kernel for device batches of `stored` samples (the loader's sample_schema(),
  // uint8 HWC) of up to `max_batch_size` samples, with crop/flip or bilinear RandomResizedCrop /
  // center crop `augment` drawn from `seed`
  // (pass the loader's seed and give the loader AugmentOptions{} so the crop happens here).
  // Allocates on the current device. Errors: those of NormalizedSchema; NotSupported when kiln
  // was built without nvcc; CudaStatus errors (cudaMalloc).
  static Result<std::unique_ptr<NormalizeKernel>> Create(const TensorSchema& stored,
                                                         const AugmentOptions& augment,
                                                         const NormalizeOptions& options,
                                                         uint32_t max_batch_size, uint64_t seed);
  ~NormalizeKernel();
  NormalizeKernel(const NormalizeKernel&) = delete;
  NormalizeKernel& operator=(const NormalizeKernel&) = delete;

  // Schema of one output sample (see NormalizedSchema).
  const TensorSchema& output_schema() const { return out_schema_; }
  // Bytes of output for `samples` samples.
  uint64_t output_bytes(uint32_t samples) const {
    return uint64_t{samples} * out_schema_.sample_bytes();
  }

  // Enqueues on `stream`: the upload of the batch's per-sample parameters, then the kernel that
  // reads batch.device_data and writes batch.size samples to `device_out` (output_bytes(size)
  // bytes of device memory). Calls batch.WaitOn(stream) first, so the kernel runs after the
  // batch's upload; WaitOn adds `stream` to the batch's consumer streams (it does not replace
  // one given to an earlier WaitOn), so the loader reuses the device buffer only after this
  // kernel and the work on every other stream that waited on the batch. Does not block the
  // host: the parameters are staged in pinned memory (two slots; a slot is reused only after
  // its copy two calls back completed). Successive calls must
  // use the same stream (the parameter buffer is reused in stream order). `stream` and the
  // kernel's parameter buffer must be on the batch's device (Create on that device); Run makes
  // it current for the call and restores the caller's device.
  // Errors: InvalidArgument when the batch has no device copy, its schema is not `stored`, or
  // it has more than max_batch_size samples; CudaStatus errors naming the call.
  Status Run(const Batch& batch, void* device_out, cudaStream_t stream);

  // Same as Run on a raw device batch `device_in` of `size` stored samples, with explicit
  // per-sample parameters (host memory, `size` entries); no WaitOn, on the current device. A
  // parameter with box_height != 0 is resized (its box to the output size, bilinear), any
  // other is cropped at (top, left) to the output size.
  // Errors: InvalidArgument when size > max_batch_size, a parameter puts the crop outside the
  // stored sample (top + crop height > height, left + crop width > width), or its resize box
  // is empty, outside the stored sample or marked `area`, naming the sample; CudaStatus errors
  // naming the call.
  Status RunRaw(const void* device_in, uint32_t size, const AugmentParams* params, void* device_out,
                cudaStream_t stream);

 private:
  NormalizeKernel() = default;
  TensorSchema stored_;
  TensorSchema out_schema_;
  AugmentOptions augment_;
  NormalizeOptions options_;
  uint32_t max_batch_size_ = 0;
  uint64_t seed_ = 0;
  static constexpr uint32_t kParamSlots = 2;
  DeviceBuffer params_;  // max_batch_size_ x {top, left, flip, box_height, box_width} uint32
  // Staging for the parameter copy: kParamSlots slots of max_batch_size_ x 5 uint32, pinned
  // when a device is usable; slot i is rewritten only after params_copied_[i] completed.
  std::unique_ptr<HostBuffer> host_params_;
  CudaEvent params_copied_[kParamSlots];
  bool param_slot_used_[kParamSlots] = {};
  uint32_t next_param_slot_ = 0;
};

}  // namespace kiln

#endif  // KILN_READER_NORMALIZE_KERNEL_H_
