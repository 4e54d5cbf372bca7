// Read-time augmentation: random crop, RandomResizedCrop and horizontal flip, applied while a
// sample is copied from the dataset into its batch slot.
//
// The parameters of sample i in epoch e are a pure function of (seed, e, i), so an epoch's
// batches are byte-identical whatever the thread count, and a resumed run sees the same crops.
// The plain crop and the flip work on every dtype and layout: they move whole elements and never
// change values. RandomResizedCrop resamples (uint8 and float32 only; see ResizeCropBilinear).
// Thread safety: stateless functions (ApplyAugment uses per-thread scratch rows and tap tables).
#ifndef KILN_READER_AUGMENTER_H_
#define KILN_READER_AUGMENTER_H_

#include <cstdint>

#include "formats/status.h"
#include "formats/tensor_schema.h"

namespace kiln {

// RandomResizedCrop's resampling of the box to the output size.
enum class ResizeInterpolation : uint8_t {
  // torchvision's InterpolationMode.BILINEAR with antialias=False (ResizeCropBilinear).
  kBilinear = 0,
  // torch.nn.functional.interpolate(mode="area") (ResizeCropArea): each output pixel the mean of
  // the box pixels its window covers. For boxes much larger than the output (more than about
  // 2x), where bilinear without antialiasing skips pixels and aliases.
  kArea = 1,
};

struct AugmentOptions {
  // Output height and width of a random crop; 0 and 0 for no crop. Must not exceed the stored
  // size. Default 0 (off).
  uint32_t crop_height = 0;
  uint32_t crop_width = 0;
  // Mirror left-right with probability 1/2 (after any crop or resize). Default false.
  bool flip = false;
  // RandomResizedCrop, as torchvision.transforms.RandomResizedCrop(size=(resize_height,
  // resize_width), scale, ratio, interpolation=BILINEAR, antialias=False): output height and
  // width in pixels; 0 and 0 for off (default). Excludes crop_height/crop_width. The output may
  // be larger than the stored size (upsampling). scale: fraction of the stored area, ratio:
  // width/height of the box, both [min, max] with 0 < min <= max (scale max <= 1).
  uint32_t resize_height = 0;
  uint32_t resize_width = 0;
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // RandomResizedCrop's resampling. Default kBilinear.
  ResizeInterpolation interpolation = ResizeInterpolation::kBilinear;

  // Center crop + resize (the evaluation transform; FFCV's CenterCropRGBImageDecoder): output
  // height and width in pixels; 0 and 0 for off (default). The box is the largest one of the
  // output's aspect ratio inside the sample, shrunk by center_crop_ratio on each side, centred
  // (top = floor((H - h) / 2), left likewise), then resized bilinearly as RandomResizedCrop's
  // box. Excludes the plain crop and RandomResizedCrop; uint8 and float32 only. JPEG-record
  // datasets need this or RandomResizedCrop (their records differ in size).
  uint32_t center_crop_height = 0;
  uint32_t center_crop_width = 0;
  // Side of the box over the side of the largest fitting box, in (0, 1]. Default 224/256 (the
  // torchvision evaluation recipe Resize(256) + CenterCrop(224)).
  double center_crop_ratio = 224.0 / 256.0;

  bool resized_crop() const { return resize_height != 0 || resize_width != 0; }
  bool center_crop() const { return center_crop_height != 0 || center_crop_width != 0; }
  // True when samples are resampled to a fixed output size (RandomResizedCrop or center crop).
  bool resamples() const { return resized_crop() || center_crop(); }
  bool enabled() const {
    return crop_height != 0 || crop_width != 0 || flip || resized_crop() || center_crop();
  }
};

// The drawn parameters for one sample.
struct AugmentParams {
  uint32_t top = 0;   // first row of the crop in the stored sample
  uint32_t left = 0;  // first column of the crop
  bool flip = false;
  // RandomResizedCrop and center crop: the box's height and width in stored pixels (0 otherwise).
  uint32_t box_height = 0;
  uint32_t box_width = 0;
  // RandomResizedCrop only: resample by area (ResizeCropArea) instead of bilinear.
  bool area = false;
};

// A crop box in stored pixels.
struct CropBox {
  uint32_t top = 0, left = 0, height = 0, width = 0;
};

// Returns the schema of augmented samples (the crop size, otherwise `stored`).
// Errors: InvalidArgument when only one crop size is set or the crop exceeds the stored size;
// for RandomResizedCrop when only one size is set, a plain crop is set too, scale or ratio is
// out of range, the interpolation is not a ResizeInterpolation value, or the dtype is not
// uint8/float32; for the center crop when only one size is set, another crop is set too, the
// ratio is outside (0, 1], or the dtype is not uint8/float32.
Result<TensorSchema> AugmentedSchema(const TensorSchema& stored, const AugmentOptions& options);

// Draws sample `sample`'s parameters for (seed, epoch): top uniform in [0, H - crop_height],
// left uniform in [0, W - crop_width], flip with probability 1/2. With RandomResizedCrop the box
// is DrawResizedCropBox's; with the center crop, CenterCropBox's (no draw but the flip).
// `stored` gives H and W: a JPEG record's own image size for JPEG-record datasets.
AugmentParams DrawAugmentParams(const TensorSchema& stored, const AugmentOptions& options,
                                uint64_t seed, uint64_t epoch, uint64_t sample);

// torchvision.transforms.RandomResizedCrop.get_params (torchvision 0.14), step for step, on an
// H x W image: up to ten tries of area = H*W * U(scale_min, scale_max), aspect ratio =
// exp(U(log ratio_min, log ratio_max)), w = round(sqrt(area * ratio)), h = round(sqrt(area /
// ratio)) (round half to even, as Python's round), accepted if 0 < w <= W and 0 < h <= H, then
// top uniform in [0, H - h] and left in [0, W - w]. After ten misses the fallback: W/H clamped to
// [ratio_min, ratio_max] (w = W, h = round(W / ratio_min) below; h = H, w = round(H * ratio_max)
// above; else the whole image), centred at ((H - h) / 2, (W - w) / 2) rounded down. The uniforms
// come from a SplitMix64 chain of `h` (53-bit doubles), not torch's generator: the algorithm is
// torchvision's, the random numbers are not.
CropBox DrawResizedCropBox(uint32_t height, uint32_t width, const AugmentOptions& options,
                           uint64_t h);

// The center crop's box on an H x W image (AugmentOptions::center_crop_height): the largest box
// of aspect center_crop_width / center_crop_height inside the image, each side times
// center_crop_ratio and rounded to nearest (at least 1, at most the image's side), centred.
CropBox CenterCropBox(uint32_t height, uint32_t width, const AugmentOptions& options);

// Bilinear resize of box `box` of a `stored` sample (uint8 or float32, HWC or CHW) at `in` to
// out_height x out_width at `out` (same dtype and layout), mirrored left-right when `flip`.
// Pixel convention as torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
// antialias=False), which torchvision.transforms.functional.resized_crop uses: pixel centres at
// +0.5, source coordinate s = (d + 0.5) * (box / out) - 0.5 with s clamped to >= 0, neighbours
// floor(s) and min(floor(s) + 1, box - 1) inside the box (pixels outside the box never read).
// Horizontal pass then vertical, in float32; uint8 results rounded half to even. No
// antialiasing: shrinking by more than 2x aliases, exactly as torchvision's antialias=False.
// Each value is exactly float(w0 * a + w1 * b) per pass: two float32 products and one float32
// sum, never fused. On x86-64 CPUs with AVX2 (checked at run time) uint8 samples go through a
// vectorised path with these same operations, so the output bytes are the same on every CPU. Only
// the source rows the vertical pass needs are resampled, each once. `row_scratch` holds 2 *
// out_width * channels floats. Thread safety: concurrent calls need distinct `row_scratch` and
// `out` (the AVX2 path keeps its tap table per thread).
void ResizeCropBilinear(const uint8_t* in, const TensorSchema& stored, const CropBox& box,
                        uint32_t out_height, uint32_t out_width, bool flip, uint8_t* out,
                        float* row_scratch);

// Area resize of box `box` of a `stored` sample (uint8 or float32, HWC or CHW) at `in` to
// out_height x out_width at `out` (same dtype and layout), mirrored left-right when `flip`, as
// torch.nn.functional.interpolate(mode="area") (adaptive_avg_pool2d) on the box: output pixel
// (y, x) is the mean of box rows [floor(y * H / oh), ceil((y + 1) * H / oh)) and columns
// [floor(x * W / ow), ceil((x + 1) * W / ow)) (H x W the box; windows of neighbouring pixels
// overlap when the sizes do not divide). uint8: the window's exact integer sum, divided in
// float32 by its height and then its width, rounded half to even (equal to torch's float32
// result rounded, on every value ResizedCropTest compares); float32: each column of the window
// summed top to bottom, the column sums left to right. Upsampling repeats pixels (windows of
// one pixel). Computed separably, without hand-written SIMD. Thread safety: none needed (no shared
// scratch).
void ResizeCropArea(const uint8_t* in, const TensorSchema& stored, const CropBox& box,
                    uint32_t out_height, uint32_t out_width, bool flip, uint8_t* out);

// Low 32 bits of XXH3-64 of the bytes of (scale_min, scale_max, ratio_min, ratio_max) as
// little-endian doubles, followed by one byte 1 when the interpolation is kArea (nothing for
// kBilinear, so older states keep their digest): what a reader state records of
// RandomResizedCrop's settings.
uint32_t ResizedCropDigest(const AugmentOptions& options);
// Low 32 bits of XXH3-64 of (center_crop_ratio, -1, -1, -1) as little-endian doubles: what a
// reader state records of the center crop (no RandomResizedCrop range has a negative value).
uint32_t CenterCropDigest(const AugmentOptions& options);

// Writes the crop of `in` (a sample of schema `stored`) at `params` to `out` (a sample of schema
// `out_schema` from AugmentedSchema), mirrored when params.flip; with RandomResizedCrop
// (params.box_height != 0) the box resized by ResizeCropBilinear, or ResizeCropArea when
// params.area.
void ApplyAugment(const uint8_t* in, const TensorSchema& stored, const AugmentParams& params,
                  const TensorSchema& out_schema, uint8_t* out);

}  // namespace kiln

#endif  // KILN_READER_AUGMENTER_H_
