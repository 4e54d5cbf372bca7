// kiln::DecodeJpeg: the converter's JPEG decoder. Decodes with libjpeg-turbo straight to R, G, B
// (or grey) order and applies the EXIF orientation read with libexif, giving the same pixels as
// cv::imdecode(IMREAD_COLOR) followed by BGR-to-RGB (tools/image_decoder.h, policy step 2)
// without OpenCV 4.6's byte-by-byte RGB-to-BGR loop and kiln's swap back (BENCHMARKS.md,
// "Converter": together about a fifth of `kiln pack`'s CPU time on photos).
//
// Same pixels because OpenCV 4.6's JPEG reader also drives the system libjpeg-turbo with its
// defaults (islow IDCT, fancy upsampling, no scaling), asking for RGB, and then reorders bytes.
// tests/tools/jpeg_decoder_test.cc compares the two on every JPEG the tests have.
//
// Orientation, as OpenCV 4.6 does it: the Orientation tag (0x0112) of IFD0 in the first APP1
// segment, if that segment is Exif; values 1..8 are applied (2: mirror left-right, 3: rotate
// 180, 4: mirror top-bottom, 5: transpose, 6: rotate 90 clockwise, 7: transverse, 8: rotate 90
// counter-clockwise), anything else is ignored.
//
// One difference: a JPEG cut inside its scan data. OpenCV 4.6's memory source suspends at the
// cut and leaves the rows it never decoded as copies of earlier ones; libjpeg-turbo's decodes
// them from no data. Neither is the picture, and DecodeImage refuses such files (no
// end-of-image marker, policy step 1) before either decoder runs.
//
// Thread safety: DecodeJpeg is reentrant.
#ifndef KILN_TOOLS_JPEG_DECODER_H_
#define KILN_TOOLS_JPEG_DECODER_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln {

// Decodes the JPEG file `bytes` into a new continuous upright CV_8UC3 image in R, G, B order
// (channels 3; a grey JPEG is replicated) or CV_8UC1 (channels 1; colour becomes grey with
// cv::COLOR_RGB2GRAY). `path` is used only in messages, which start with "<path>: ".
// Errors:
//   InvalidArgument  the header's size exceeds `max_pixels` (0: no limit), checked before any
//                 pixel memory is allocated: "W x H = P pixels exceeds the limit of L (raise
//                 --max-pixels)", as DecodeImage says it.
//   NotSupported  a CMYK or YCCK JPEG (4 components; libjpeg does not convert them to RGB:
//                 use OpenCV, which does), channels not 1 or 3.
//   Corruption    "truncated or invalid (libjpeg: <its message>)": libjpeg stopped decoding.
//                 libjpeg's warnings (for example "Corrupt JPEG data: premature end of data
//                 segment") do not stop it, as in OpenCV: the damaged blocks decode as grey.
Result<cv::Mat> DecodeJpeg(std::string_view bytes, const std::string& path, uint32_t channels,
                           uint64_t max_pixels);

// Returns the EXIF orientation (1..8) that DecodeJpeg applies to the JPEG `bytes`, or 1 when
// it applies none (no Exif APP1 first, no tag, a value outside 1..8, unreadable EXIF).
int JpegExifOrientation(std::string_view bytes);

}  // namespace kiln

#endif  // KILN_TOOLS_JPEG_DECODER_H_
