// kiln::EncodeJpegRecord: the converter's encoder of JPEG records (`kiln pack --codec
// jpeg:QUALITY --max-side N`, formats/shards/shard_format.md section 4): resizes an upright image
// so that its longer side is at most the max side, keeping its aspect ratio, and encodes it as
// one baseline JPEG with libjpeg-turbo.
//
// Resize: an image whose longer side L exceeds max_side becomes max_side on that side and
// max(1, int(S * max_side / L)) (truncated, as torchvision's Resize) on the shorter side S, with
// cv::INTER_AREA; smaller images keep their size. When the image was decoded smaller than its
// full size (shrink-on-load), the target is computed from the full size, so the geometry equals
// a full decode's.
// Encode: libjpeg's defaults at `quality` (jpeg_set_quality with force_baseline), islow DCT, no
// Huffman optimisation, chroma 4:2:0 for colour (JFIF, YCbCr), grey as one component; no
// metadata. Deterministic for a given libjpeg-turbo version.
// Thread safety: reentrant.
#ifndef KILN_TOOLS_IMAGING_JPEG_ENCODER_H_
#define KILN_TOOLS_IMAGING_JPEG_ENCODER_H_

#include <cstdint>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "formats/record_codec.h"
#include "formats/status.h"

namespace kiln {

// Returns the size (width, height) EncodeJpegRecord stores an image of `width` x `height`
// (full, upright) at: unchanged when both sides are at most `max_side`.
cv::Size JpegRecordSize(uint64_t width, uint64_t height, uint32_t max_side);

// Fills `record` (codec kJpeg, stored = the JPEG, raw_size = stored width x height x channels,
// label, key, checksum) from `image` (CV_8UC3 R, G, B or CV_8UC1, as DecodeImage returns it).
// `full_size`: the image's full upright size when it was decoded smaller; empty: image.size().
// Errors: InvalidArgument for an empty or non-8-bit image or options out of range; Internal
// naming libjpeg's message when encoding fails. `path` names the file in errors.
Status EncodeJpegRecord(const cv::Mat& image, const JpegRecordOptions& options, int64_t label,
                        std::string key, const std::string& path, EncodedRecord* record,
                        cv::Size full_size = cv::Size());

// Encodes `image` (CV_8UC3 R, G, B or CV_8UC1, continuous or not) as above into `out`.
// Errors: Internal naming libjpeg's message.
Status EncodeJpeg(const cv::Mat& image, int quality, std::vector<uint8_t>* out);

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_JPEG_ENCODER_H_
