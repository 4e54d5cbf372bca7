// kiln::Preprocess: the converter's preprocess stage. Turns one upright 8-bit image from
// DecodeImage (tools/imaging/image_decoder.h) into the bytes of one sample tensor of the dataset's
// TensorSchema: resize, centre crop, layout, dtype and normalisation.
//
// Resize policy (see tools/imaging/decode_policy.md, "Preprocessing"):
//   - New sizes are computed like torchvision's Resize(int): the shorter side becomes
//     `resize_shorter` and the longer one int(long * resize_shorter / short) (truncated), each
//     at least 1 pixel.
//   - Shrinking uses cv::INTER_AREA (box filter: anti-aliased, pixel centres at i + 0.5);
//     enlarging uses cv::INTER_LINEAR (bilinear, pixel centres at i + 0.5). When one axis
//     shrinks and the other grows, the image is resized in two passes, first the shrinking axis
//     with INTER_AREA, then the growing one with INTER_LINEAR. An image already of the target
//     size is not resampled.
//   - The centre crop starts at floor((size - crop) / 2) on each axis.
//   - The output is a pure function of the input pixels and options: deterministic, whatever
//     the thread and the number of threads.
//
// Thread safety: Preprocess and ValidatePreprocessOptions are reentrant.
#ifndef KILN_TOOLS_IMAGING_PREPROCESSOR_H_
#define KILN_TOOLS_IMAGING_PREPROCESSOR_H_

#include <array>
#include <cstdint>
#include <opencv2/core.hpp>
#include <string>

#include "formats/status.h"
#include "formats/tensor_schema.h"
#include "tools/imaging/preprocess_options.h"

namespace kiln {

// Returns OK when `options` is usable.
// Errors: InvalidArgument naming the field: schema not valid (TensorSchema::Validate), a mean
// or std that is not finite, a std of 0.
Status ValidatePreprocessOptions(const PreprocessOptions& options);

// Returns the size (width, height) that Preprocess resizes an upright image of `src_width` x
// `src_height` pixels to, before the centre crop (tools/imaging/decode_policy.md, "Preprocessing",
// step 1: torchvision's Resize(resize_shorter), the smallest cover of the crop, or the schema's
// size for CropMode::kNone). `path` names the file in errors as in Preprocess.
// Errors: InvalidArgument when a side is 0, when the result exceeds options.max_pixels or
// INT_MAX per side, or when it is smaller than the crop (the message gives both sizes).
Result<cv::Size> ResizedSize(uint64_t src_width, uint64_t src_height,
                             const PreprocessOptions& options, const std::string& path);

// Writes exactly options.schema.sample_bytes() bytes at `out`: the sample tensor of `image` in
// the schema's layout (HWC or CHW) and dtype (uint8 0..255; float16 / float32 little-endian
// IEEE 754, normalised as documented on PreprocessOptions::mean).
//
// `image` is an upright 8-bit image as DecodeImage returns it (CV_8UC3 in R, G, B order or
// CV_8UC1) whose channel count equals schema.channels; it is not modified. `out` must not
// overlap `image`. `path` names the file in errors: their message starts with "<path>: ", their
// location().file is `path` and their reason() is the message after it (an empty `path`: the
// bare reason, no location).
// `full_size`: the upright size the image has at full scale, when `image` was decoded smaller
// (shrink-on-load, DecodeImage's full_size); the resize target and the crop are computed from it
// (ResizedSize), so that the output has the same geometry as from the full decode, and `image`
// is resampled to that target. Empty (the default): image.size().
// Errors:
//   InvalidArgument  options fail ValidatePreprocessOptions; `image` empty, not 8-bit or with
//                    the wrong channel count; the resized image exceeds options.max_pixels;
//                    the resized image is still smaller than the crop (possible when
//                    resize_shorter < the schema's height or width): the message gives both
//                    sizes.
//   Internal         OpenCV failed (a kiln bug).
// On error the bytes at `out` are unspecified.
Status Preprocess(const cv::Mat& image, const PreprocessOptions& options, const std::string& path,
                  uint8_t* out, cv::Size full_size = cv::Size());

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_PREPROCESSOR_H_
