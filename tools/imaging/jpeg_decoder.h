// kiln::DecodeJpeg: the converter's JPEG decoder. Decodes with libjpeg-turbo straight to R, G, B
// (or grey) order and applies the EXIF orientation read with libexif, giving the same pixels as
// cv::imdecode(IMREAD_COLOR) followed by BGR-to-RGB (tools/imaging/image_decoder.h, policy step 2)
// without OpenCV 4.6's byte-by-byte RGB-to-BGR loop and kiln's swap back (BENCHMARKS.md,
// "Converter": together about a fifth of `kiln pack`'s CPU time on photos).
//
// Same pixels because OpenCV 4.6's JPEG reader also drives the system libjpeg-turbo with its
// defaults (islow IDCT, fancy upsampling, no scaling), asking for RGB, and then reorders bytes.
// tests/tools/jpeg_decoder_test.cc compares the two on every JPEG the tests have.
//
// Orientation: the Orientation tag (0x0112) of IFD0 in the first APP1 segment that starts with
// the Exif identifier "Exif\0\0", in either TIFF byte order ("II" or "MM"), whatever APP1
// segments come before it (phones write XMP and XMP-extension APP1s first). Values 1..8 are
// applied as OpenCV 4.6 applies them (2: mirror left-right, 3: rotate 180, 4: mirror
// top-bottom, 5: transpose, 6: rotate 90 clockwise, 7: transverse, 8: rotate 90
// counter-clockwise); anything else is ignored. Where OpenCV 4.6 differs: it reads the first
// APP1 only, so it ignores the orientation of a file whose Exif APP1 follows an XMP one.
//
// Damaged data: libjpeg reports damaged entropy-coded data as a warning and goes on decoding,
// filling what it could not decode with grey or with garbage. DecodeJpeg stops at the first
// such warning and refuses the file (IsHarmlessJpegWarning says which warnings are not about
// damage; tools/imaging/decode_policy.md lists them).
//
// Another difference: a JPEG cut inside its scan data. OpenCV 4.6's memory source suspends at the
// cut and leaves the rows it never decoded as copies of earlier ones; libjpeg-turbo's decodes
// them from no data. Neither is the picture, and DecodeImage refuses such files (no
// end-of-image marker, policy step 1) before either decoder runs.
//
// Shrink-on-load: given a minimum upright size, DecodeJpeg decodes at the smallest of
// libjpeg-turbo's IDCT scales 1/8, 1/4, 1/2 (scale_num / scale_denom) whose result is still at
// least that size on both sides (JpegScaleDenominator), as image servers do; the pixels then
// differ from a full decode followed by a resize by what tools/imaging/decode_policy.md, "Shrink on
// load", measures. Without a minimum (the default) the decode is at full size, as above.
//
// Thread safety: DecodeJpeg is reentrant.
#ifndef KILN_TOOLS_IMAGING_JPEG_DECODER_H_
#define KILN_TOOLS_IMAGING_JPEG_DECODER_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln {

// Decodes the JPEG file `bytes` into a new continuous upright CV_8UC3 image in R, G, B order
// (channels 3; a grey JPEG is replicated) or CV_8UC1 (channels 1; colour becomes grey with
// cv::COLOR_RGB2GRAY). `path` names the file in errors: their message starts with "<path>: ",
// their location().file is `path` and their reason() is the message after it (an empty `path`:
// the message is the bare reason and no location is attached).
// `min_width` x `min_height` (upright pixels, both > 0 to take effect; default 0, full size):
// the image is decoded at 1 / JpegScaleDenominator(stored size, the minimum in stored
// orientation), so the result is at least that size (or at full size when the file is
// smaller). `full_size`, when not null, receives the upright size at full scale (the header's
// size, turned for orientations 5..8), whatever the scale.
// Errors:
//   InvalidArgument  the header's size exceeds `max_pixels` (0: no limit), checked before any
//                 pixel memory is allocated: "W x H = P pixels exceeds the limit of L (raise
//                 --max-pixels)", as DecodeImage says it.
//   NotSupported  a CMYK or YCCK JPEG (4 components; libjpeg does not convert them to RGB:
//                 use OpenCV, which does) whose scans decode without damage; channels not 1
//                 or 3.
//   Corruption    "truncated or invalid (libjpeg: <its message>)": libjpeg stopped decoding.
//                 "damaged image data (libjpeg: <its warning>)": libjpeg warned about damaged
//                 data (for example "Corrupt JPEG data: premature end of data segment"), in a
//                 file of 1, 3 or 4 components.
Result<cv::Mat> DecodeJpeg(std::string_view bytes, const std::string& path, uint32_t channels,
                           uint64_t max_pixels, uint32_t min_width = 0, uint32_t min_height = 0,
                           cv::Size* full_size = nullptr);

// Returns the IDCT scale denominator for a JPEG of `width` x `height` (stored orientation):
// the largest d of 8, 4, 2 with ceil(width / d) >= min_width and ceil(height / d) >= min_height
// (libjpeg-turbo's output size at scale 1/d), else 1; 1 when min_width or min_height is 0.
// Example: 5120 x 2880 with a minimum of 796 x 448 gives 4 (1280 x 720).
uint32_t JpegScaleDenominator(uint64_t width, uint64_t height, uint32_t min_width,
                              uint32_t min_height);

// Returns the EXIF orientation (1..8) that DecodeJpeg applies to the JPEG `bytes`, or 1 when
// it applies none (no Exif APP1, no tag, a value outside 1..8, unreadable EXIF or header).
int JpegExifOrientation(std::string_view bytes);

// Returns `image` turned upright for EXIF orientation `orientation` (1..8; others return
// `image` itself), as OpenCV 4.6's ApplyExifOrientation does. A new Mat unless 1.
cv::Mat ApplyExifOrientation(const cv::Mat& image, int orientation);

// Returns true when libjpeg's warning `msg_code` (a JWRN_* code of jerror.h) says nothing about
// damaged pixels: JWRN_JFIF_MAJOR (unknown JFIF version), JWRN_ADOBE_XFORM (unknown Adobe
// colour transform code), JWRN_BOGUS_ICC (malformed ICC profile) and JWRN_NOT_SEQUENTIAL
// (unusual SOS parameters that a baseline decoder ignores). Every other warning, including any
// that a later libjpeg adds, is damage. (Bytes between header markers, JWRN_EXTRANEOUS_DATA
// before the first scan, never reach libjpeg: DecodeImage's header check refuses them.)
bool IsHarmlessJpegWarning(int msg_code);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_JPEG_DECODER_H_
