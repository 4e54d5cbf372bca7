// kiln::DecodeImage: the converter's decode stage. Turns the bytes of one encoded image file
// into an upright 8-bit RGB or grey image (at full size, or reduced in the IDCT for a JPEG when
// DecodeOptions asks for shrink-on-load), under the one decode policy that every kiln path
// uses (also written down in tools/imaging/decode_policy.md):
//
//   1. Refusals before decoding. Empty input is refused, and so is input that starts with no
//      magic number kiln knows (tools/imaging/image_header.h: SniffImageFormat): "not an image",
//      without asking OpenCV, whose fallback decoders (DICOM through GDCM, GDAL) need temporary
//      files and can abort the process. Floating-point formats (PFM, OpenEXR, Radiance HDR) are
//      refused with NotSupported, as step 3 would after decoding. For PNG, JPEG, BMP, TIFF,
//      WebP and PNM the header is parsed first (tools/imaging/image_header.h): a header cut short
//      or malformed is refused as truncated, and an image claiming more than `max_pixels` pixels is
//      refused before any pixel buffer is allocated; a PNG whose IDAT data is too short to
//      inflate to the size in its IHDR (more than 1032:1, deflate's limit) and a JPEG with no
//      end-of-image marker after its scan data are refused as truncated. Other formats (GIF
//      and animated WebP before their canvas exists, JPEG 2000 ...) are checked against
//      `max_pixels` after decoding. OpenCV's own limits apply during decoding (2^30 pixels and
//      2^20 a side unless OPENCV_IO_MAX_IMAGE_PIXELS / _WIDTH / _HEIGHT say otherwise); an image
//      over them is refused with kiln's message, never OpenCV's assertion text.
//   2. Orientation. JPEG is decoded by DecodeJpeg (tools/imaging/jpeg_decoder.h: libjpeg-turbo
//   straight
//      to RGB, the pixels of cv::IMREAD_COLOR), which applies the EXIF Orientation tag (values
//      1..8, mirrored ones included) of the first APP1 segment that is Exif, and refuses a file
//      whose data libjpeg warns is damaged; CMYK / YCCK JPEGs are checked for damage the same
//      way, then converted to RGB by cv::IMREAD_COLOR, and oriented as DecodeJpeg reads the tag.
//      GIF and animated WebP, which Debian's OpenCV 4.6 cannot read, give their first frame
//      (tools/imaging/first_frame_decoder.h), with alpha. Every other format (PNG and APNG, BMP,
//      TIFF, still WebP, PNM ...) is decoded with cv::IMREAD_UNCHANGED so that 16-bit samples and
//      alpha survive (an APNG gives its default image, a multi-page TIFF its first page);
//      OpenCV then ignores orientation metadata, so EXIF
//      orientation is applied to JPEG only (a PNG eXIf chunk, a TIFF Orientation tag or WebP
//      EXIF are NOT applied: such files are packed in stored orientation).
//   3. Depth. 16-bit samples become 8-bit as round(v / 257) = (v * 255 + 32767) / 65535, so
//      0 -> 0, 0x1234 -> 18, 0x8000 -> 128, 0xFFFF -> 255. Other depths (32-bit float TIFF,
//      EXR, HDR, PFM, signed samples) are refused with NotSupported.
//   4. Alpha. What the header declares decides whether there is alpha: a 32-bit BMP has alpha
//      only when its header holds a non-zero alpha mask (tools/imaging/image_header.h:
//      BmpDeclaresAlpha); otherwise its fourth byte is padding and is dropped.
//      RGBA, grey + alpha and palette + tRNS images are composited over the grey level
//      `background` (white by default) after step 3: out = round((c * a + bg * (255 - a)) / 255)
//      per channel. Transparent pixels therefore become (bg, bg, bg) whatever colour they hide.
//      (RGB + tRNS colour key is composited too; grey + tRNS key is not: OpenCV drops it.)
//   5. Channels. Grey is replicated to R = G = B when 3 channels are asked for; colour becomes
//      grey when 1 is asked for with OpenCV's BT.601 weights (cv::cvtColor RGB2GRAY:
//      0.299 R + 0.587 G + 0.114 B, fixed point, rounded).
//
// Thread safety: DecodeImage is reentrant; concurrent calls from any number of threads are safe.
#ifndef KILN_TOOLS_IMAGING_IMAGE_DECODER_H_
#define KILN_TOOLS_IMAGING_IMAGE_DECODER_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>

#include "formats/status.h"
#include "tools/imaging/decode_options.h"

namespace kiln {

// Decodes the encoded image (JPEG, PNG, BMP, TIFF, WebP, PPM/PGM/PBM/PAM: whatever this OpenCV
// build reads; GIF and animated WebP through giflib and libwebp) held in `bytes`, following the
// policy at the top of this file.
//
// Returns a new, continuous, upright 8-bit image of the file's size after orientation:
// CV_8UC3 with channels in R, G, B order when options.channels is 3, CV_8UC1 when it is 1.
// Never returns an empty Mat. `bytes` is only read during the call. `path` names the file in
// errors: their message starts with "<path>: ", their location().file is `path` and their
// reason() is the message after it (an empty `path`: the bare reason, no location).
// `full_size`, when not null, receives the upright size at full scale: the result's size,
// unless options.min_width / min_height let a JPEG be decoded smaller.
// Errors:
//   InvalidArgument  "empty file"; options.channels not 1 or 3;
//                    "W x H = P pixels exceeds the limit of L (raise --max-pixels)";
//                    "W x H = P pixels exceeds OpenCV's decoder limit (...)".
//   Corruption       "not an image" (no magic number kiln knows);
//                    "truncated or invalid (...)" (a known format that fails to decode, a PNG
//                    bomb or truncated PNG, a JPEG without end-of-image marker);
//                    "damaged image data (libjpeg: <warning>)" (a JPEG that libjpeg decodes
//                    with a warning about damaged data; tools/imaging/decode_policy.md lists them).
//   NotSupported     a sample depth or channel count outside the policy (32-bit float, 5+
//                    channels; PFM, OpenEXR and Radiance HDR files before decoding), or an
//                    input of 2 GiB or more.
//   OutOfRange       "out of memory decoding ..." when the decoder's memory cannot be
//                    allocated (RLIMIT_AS, a container's memory limit): not the file's fault,
//                    so kiln pack stops with it instead of rejecting the file.
Result<cv::Mat> DecodeImage(std::string_view bytes, const std::string& path,
                            const DecodeOptions& options, cv::Size* full_size = nullptr);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_IMAGE_DECODER_H_
