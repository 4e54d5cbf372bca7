#include "tools/imaging/shrink_on_load.h"

#include <string>

#include "tools/imaging/image_header.h"
#include "tools/imaging/jpeg_decoder.h"

namespace kiln {

cv::Size ShrinkOnLoadMinimum(uint64_t width, uint64_t height, const PreprocessOptions& preprocess) {
  Result<cv::Size> target = ResizedSize(width, height, preprocess, std::string());
  if (!target.ok()) return cv::Size();
  const uint64_t min_w = 2 * static_cast<uint64_t>(target->width);
  const uint64_t min_h = 2 * static_cast<uint64_t>(target->height);
  if (min_w > INT32_MAX || min_h > INT32_MAX) return cv::Size();
  return cv::Size(static_cast<int>(min_w), static_cast<int>(min_h));
}

DecodeOptions ShrinkOnLoadDecodeOptions(std::string_view bytes, const DecodeOptions& decode,
                                        const PreprocessOptions& preprocess) {
  if (SniffImageFormat(bytes) != ImageFormat::kJpeg) return decode;
  Result<ImageSize> size = PeekImageSize(bytes);
  if (!size.ok()) return decode;
  const uint64_t w = size->width, h = size->height;
  // Most small JPEGs (tiles, thumbnails) allow no reduction in either orientation: then the
  // orientation, a second header parse, is not needed.
  const cv::Size stored = ShrinkOnLoadMinimum(w, h, preprocess);
  const cv::Size turned = ShrinkOnLoadMinimum(h, w, preprocess);
  const bool stored_fits =
      !stored.empty() && JpegScaleDenominator(w, h, stored.width, stored.height) > 1;
  const bool turned_fits =
      !turned.empty() && JpegScaleDenominator(w, h, turned.height, turned.width) > 1;
  if (!stored_fits && !turned_fits) return decode;
  const cv::Size minimum = JpegExifOrientation(bytes) >= 5 ? turned : stored;
  DecodeOptions out = decode;
  out.min_width = static_cast<uint32_t>(minimum.width);
  out.min_height = static_cast<uint32_t>(minimum.height);
  return out;
}

}  // namespace kiln
