// Fuzz target: the converter's decode stage on untrusted image files. Input layout: byte 0 =
// options (bit 0: 1 channel instead of 3; bit 1: background 0 instead of 255), the rest = the
// image file. DecodeImage runs with a limit of 2^20 pixels, so no input allocates much.
// Oracles besides "no crash, no sanitizer report":
//   - a decoded image is non-empty, continuous, 8-bit, with the channels asked for and at most
//     2^20 pixels; an error's message starts with the path;
//   - a JPEG that libjpeg-turbo decodes (DecodeJpeg) has, byte for byte, OpenCV's pixels
//     (cv::IMREAD_COLOR | IMREAD_IGNORE_ORIENTATION, BGR to RGB or grey) oriented by the
//     EXIF value DecodeJpeg reads (JpegExifOrientation): tools/imaging/jpeg_decoder.h's promise.
//     Only inputs whose scan data is whole are compared (the header says so: a cut scan is the one
//     documented difference, and DecodeImage refuses it anyway).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <string_view>

#include "tools/imaging/image_decoder.h"
#include "tools/imaging/image_header.h"
#include "tools/imaging/jpeg_decoder.h"

namespace {

constexpr uint64_t kMaxPixels = uint64_t{1} << 20;
const char kPath[] = "fuzz/input.img";

void Require(bool condition, const char* what, const std::string& detail) {
  if (condition) return;
  std::fprintf(stderr, "kiln image_decoder_fuzzer: oracle failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

// EXIF orientation o applied as tools/imaging/jpeg_decoder.h documents it.
cv::Mat Orient(const cv::Mat& image, int o) {
  cv::Mat out;
  switch (o) {
    case 2:
      cv::flip(image, out, 1);
      return out;
    case 3:
      cv::flip(image, out, -1);
      return out;
    case 4:
      cv::flip(image, out, 0);
      return out;
    case 5:
      cv::transpose(image, out);
      return out;
    case 6:
      cv::transpose(image, out);
      cv::flip(out, out, 1);
      return out;
    case 7:
      cv::transpose(image, out);
      cv::flip(out, out, -1);
      return out;
    case 8:
      cv::transpose(image, out);
      cv::flip(out, out, 0);
      return out;
    default:
      return image;
  }
}

void CheckJpegAgainstOpenCv(std::string_view bytes, int channels) {
  kiln::Result<kiln::ImageSize> size = kiln::PeekImageSize(bytes);
  if (!size.ok() || size->format != kiln::ImageFormat::kJpeg || !size->jpeg_has_end_marker ||
      size->width * size->height > kMaxPixels) {
    return;
  }
  kiln::Result<cv::Mat> ours =
      kiln::DecodeJpeg(bytes, kPath, static_cast<uint32_t>(channels), kMaxPixels);
  if (!ours.ok()) return;
  const cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
  cv::Mat bgr;
  try {
    bgr = cv::imdecode(buffer, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  } catch (const cv::Exception&) {
    return;
  }
  if (bgr.empty()) return;  // OpenCV's own checks (its pixel limits) refused it
  cv::Mat reference;
  cv::cvtColor(bgr, reference, channels == 1 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
  reference = Orient(reference, kiln::JpegExifOrientation(bytes));
  Require(ours->size() == reference.size() && ours->type() == reference.type(),
          "DecodeJpeg's size and type equal OpenCV's",
          std::to_string(ours->cols) + "x" + std::to_string(ours->rows) + " vs " +
              std::to_string(reference.cols) + "x" + std::to_string(reference.rows));
  Require(cv::norm(*ours, reference, cv::NORM_INF) == 0, "DecodeJpeg's pixels equal OpenCV's",
          "channels " + std::to_string(channels));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
    return true;
  }();
  (void)quiet;
  if (size < 1) return 0;
  kiln::DecodeOptions options;
  options.channels = (data[0] & 1) != 0 ? 1 : 3;
  options.background = (data[0] & 2) != 0 ? 0 : 255;
  options.max_pixels = kMaxPixels;
  // The file in its own allocation, so ASan sees any read past its end.
  const std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  kiln::Result<cv::Mat> image = kiln::DecodeImage(file, kPath, options);
  if (!image.ok()) {
    Require(image.status().message().rfind(std::string(kPath) + ": ", 0) == 0,
            "errors name the file", image.status().ToString());
  } else {
    const cv::Mat& m = *image;
    Require(!m.empty() && m.isContinuous() && m.depth() == CV_8U &&
                static_cast<uint32_t>(m.channels()) == options.channels,
            "a decoded image is continuous 8-bit with the channels asked for",
            cv::typeToString(m.type()));
    Require(uint64_t(m.cols) * uint64_t(m.rows) <= kMaxPixels, "the pixel limit holds",
            std::to_string(m.cols) + "x" + std::to_string(m.rows));
  }
  CheckJpegAgainstOpenCv(file, static_cast<int>(options.channels));
  return 0;
}
