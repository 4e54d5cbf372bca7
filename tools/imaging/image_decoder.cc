#include "tools/imaging/image_decoder.h"

#include <climits>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>

#include "tools/imaging/first_frame_decoder.h"
#include "tools/imaging/image_header.h"
#include "tools/imaging/jpeg_decoder.h"

namespace kiln {
namespace {

// Deflate emits at most 258 bytes per 1-bit-minimum symbol pair, which bounds its expansion at
// about 1032:1. The slack covers zlib headers and the smallest images.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kDeflateSlackBytes = 1024;

std::string PixelCount(uint64_t width, uint64_t height) {
  return std::to_string(width) + " x " + std::to_string(height) + " = " +
         std::to_string(width * height) + " pixels";
}

Status CheckPixelLimit(uint64_t width, uint64_t height, const DecodeOptions& options) {
  if (options.max_pixels != 0 && width * height > options.max_pixels) {
    return Status::InvalidArgument(PixelCount(width, height) + " exceeds the limit of " +
                                   std::to_string(options.max_pixels) + " (raise --max-pixels)");
  }
  return Status::Ok();
}

// Checks what the header claims before OpenCV sees the bytes (policy step 1).
Status CheckHeader(std::string_view bytes, const DecodeOptions& options) {
  Result<ImageSize> size = PeekImageSize(bytes);
  if (!size.ok()) {
    if (size.status().code() == StatusCode::kNotSupported) return Status::Ok();
    return Status::Corruption("truncated or invalid (" + size.status().message() + ")");
  }
  KILN_RETURN_IF_ERROR(CheckPixelLimit(size->width, size->height, options));
  if (size->format == ImageFormat::kPng &&
      size->png_inflated_bytes > kMaxDeflateRatio * size->png_idat_bytes + kDeflateSlackBytes) {
    return Status::Corruption("truncated or invalid (PNG header claims " +
                              PixelCount(size->width, size->height) + " but holds only " +
                              std::to_string(size->png_idat_bytes) + " bytes of image data)");
  }
  if (size->format == ImageFormat::kJpeg && !size->jpeg_has_end_marker) {
    return Status::Corruption(
        "truncated or invalid (JPEG has no end-of-image marker after its scan data)");
  }
  return Status::Ok();
}

// Policy step 3: 16-bit to 8-bit by round(v / 257). v / 257 is never within 0.0019 of a
// half-integer (v = 257 k + r with r an integer, and r / 257 is never 0.5), so the rounding of
// convertTo's double product equals the integer formula (v * 255 + 32767) / 65535 exactly.
Result<cv::Mat> ToDepth8(const cv::Mat& image) {
  switch (image.depth()) {
    case CV_8U:
      return image;
    case CV_16U: {
      cv::Mat out;
      image.convertTo(out, CV_8U, 1.0 / 257.0);
      return out;
    }
    default:
      return Status::NotSupported("sample depth " + cv::typeToString(image.type()) +
                                  " is not 8- or 16-bit unsigned integer");
  }
}

// Policy step 4: composites the last channel (alpha) of an 8-bit BGRA or grey+alpha image over
// `background`, returning BGR or grey.
cv::Mat CompositeAlpha(const cv::Mat& image, uint8_t background) {
  const int colour_channels = image.channels() - 1;
  cv::Mat out(image.rows, image.cols, CV_8UC(colour_channels));
  const uint32_t bg = background;
  for (int y = 0; y < image.rows; ++y) {
    const uint8_t* src = image.ptr<uint8_t>(y);
    uint8_t* dst = out.ptr<uint8_t>(y);
    for (int x = 0; x < image.cols; ++x) {
      const uint32_t alpha = src[colour_channels];
      for (int c = 0; c < colour_channels; ++c) {
        // (n + 127) / 255 rounds n / 255 to nearest; ties cannot occur because 255 is odd.
        dst[c] = static_cast<uint8_t>((src[c] * alpha + bg * (255 - alpha) + 127) / 255);
      }
      src += image.channels();
      dst += colour_channels;
    }
  }
  return out;
}

// Policy steps 3 to 5 on whatever OpenCV returned (BGR order for colour).
Result<cv::Mat> Normalise(const cv::Mat& decoded, const DecodeOptions& options) {
  KILN_ASSIGN_OR_RETURN(cv::Mat image, ToDepth8(decoded));
  if (image.channels() == 2 || image.channels() == 4) {
    image = CompositeAlpha(image, options.background);
  }
  cv::Mat out;
  if (image.channels() == 1) {
    if (options.channels == 1) {
      out = image.isContinuous() ? image : image.clone();
    } else {
      cv::cvtColor(image, out, cv::COLOR_GRAY2RGB);
    }
  } else if (image.channels() == 3) {
    cv::cvtColor(image, out, options.channels == 1 ? cv::COLOR_BGR2GRAY : cv::COLOR_BGR2RGB);
  } else {
    return Status::NotSupported(std::to_string(decoded.channels()) +
                                " channels (expected grey, grey+alpha, colour or colour+alpha)");
  }
  return out;
}

// The error for a decoder allocation that failed: the process's memory, not the file.
Status OutOfMemory(ImageFormat format, std::string what) {
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return Status::OutOfRange("out of memory decoding this " + std::string(ImageFormatName(format)) +
                            " file (" + what +
                            "): the address-space or memory limit (RLIMIT_AS, the container's "
                            "memory) is reached; lower --threads, or raise the limit");
}

// The error for an image over OpenCV's own decoder limits (2^30 pixels, 2^20 per side unless
// OPENCV_IO_MAX_IMAGE_PIXELS / _WIDTH / _HEIGHT say otherwise), which apply even when
// --max-pixels is 0 or larger: OpenCV's assertion text would name none of this.
Status OpenCvSizeLimit(ImageFormat format, std::string_view bytes) {
  std::string size = "this " + std::string(ImageFormatName(format)) + " file";
  if (Result<ImageSize> header = PeekImageSize(bytes); header.ok()) {
    size = PixelCount(header->width, header->height);
  }
  return Status::InvalidArgument(
      size +
      " exceeds OpenCV's decoder limit (by default 2^30 pixels, 2^20 a side: "
      "raise OPENCV_IO_MAX_IMAGE_PIXELS, OPENCV_IO_MAX_IMAGE_WIDTH or "
      "OPENCV_IO_MAX_IMAGE_HEIGHT with --max-pixels)");
}

// DecodeImage without the file name: its messages are the bare reasons (the JPEG and first-frame
// decoders are given an empty path for that).
Result<cv::Mat> Decode(std::string_view bytes, const DecodeOptions& options, cv::Size* full_size) {
  if (options.channels != 1 && options.channels != 3) {
    return Status::InvalidArgument("DecodeOptions.channels is " + std::to_string(options.channels) +
                                   ", expected 1 or 3");
  }
  if (bytes.empty()) return Status::InvalidArgument("empty file");
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return Status::NotSupported(std::to_string(bytes.size()) +
                                " bytes; encoded images of 2 GiB or more are not supported");
  }
  KILN_RETURN_IF_ERROR(CheckHeader(bytes, options));

  const ImageFormat format = SniffImageFormat(bytes);
  // Bytes with no magic number kiln knows never reach OpenCV: cv::imdecode would offer them to
  // every decoder it has, and some (GDCM's DICOM reader, GDAL) need a temporary file, which
  // OpenCV 4.6 leaves behind in /tmp when the decoder throws, and GDCM aborts the process on
  // some damaged files (fuzz finding F8).
  if (format == ImageFormat::kUnknown) return Status::Corruption("not an image");
  // Floating-point formats are refused by step 3 whatever their pixels; OpenCV decodes PFM
  // through a temporary file too, left behind when the file is damaged (F8).
  if (format == ImageFormat::kFloat) {
    return Status::NotSupported(
        "floating-point samples (PFM, OpenEXR or Radiance HDR) are not supported (8- and 16-bit "
        "unsigned integer only)");
  }
  if (format == ImageFormat::kJpeg) {
    // libjpeg-turbo straight to RGB or grey, EXIF orientation applied: OpenCV's pixels without
    // its byte-order loops (tools/imaging/jpeg_decoder.h). CMYK and YCCK go on to OpenCV below.
    Result<cv::Mat> jpeg = DecodeJpeg(bytes, {}, options.channels, options.max_pixels,
                                      options.min_width, options.min_height, full_size);
    if (jpeg.ok() || jpeg.status().code() != StatusCode::kNotSupported) return jpeg;
  }
  // CMYK / YCCK JPEG (DecodeJpeg decoded its scans and found no damage): IMREAD_COLOR converts
  // it to 8-bit BGR; the orientation is applied below as DecodeJpeg reads it, since OpenCV
  // looks at the first APP1 only. Others: IMREAD_UNCHANGED keeps 16-bit samples and alpha.
  cv::Mat decoded;
  if (format == ImageFormat::kGif || (format == ImageFormat::kWebp && IsAnimatedWebp(bytes))) {
    // Debian's OpenCV 4.6 has no GIF reader and refuses animated WebP: first frame, as Pillow.
    Result<cv::Mat> frame = format == ImageFormat::kGif
                                ? DecodeGifFirstFrame(bytes, {}, options.max_pixels)
                                : DecodeAnimatedWebpFirstFrame(bytes, {}, options.max_pixels);
    if (!frame.ok()) return frame.status();
    decoded = std::move(frame).value();
  } else {
    const int flags = format == ImageFormat::kJpeg
                          ? cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION
                          : cv::IMREAD_UNCHANGED;
    std::string opencv_error;
    try {
      // imdecode only reads the buffer; the const_cast is needed by cv::Mat's constructor.
      const cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1,
                           const_cast<char*>(bytes.data()));
      decoded = cv::imdecode(buffer, flags);
    } catch (const cv::Exception& e) {
      if (e.code == cv::Error::StsNoMem) return OutOfMemory(format, e.what());
      if (e.func == "validateInputImageSize") return OpenCvSizeLimit(format, bytes);
      // e.err is the reason alone; e.what() adds OpenCV's version, source file and line.
      opencv_error = e.err;
    } catch (const std::bad_alloc& e) {
      return OutOfMemory(format, e.what());
    } catch (const std::exception& e) {
      opencv_error = e.what();
    }
    if (decoded.empty()) {
      std::string reason = "truncated or invalid (OpenCV could not decode this " +
                           std::string(ImageFormatName(format)) + " file";
      if (!opencv_error.empty()) reason += ": " + opencv_error;
      return Status::Corruption(reason + ")");
    }
  }
  if (format == ImageFormat::kJpeg) {
    decoded = ApplyExifOrientation(decoded, JpegExifOrientation(bytes));
  }
  if (format == ImageFormat::kBmp && decoded.channels() == 4 && !BmpDeclaresAlpha(bytes)) {
    // OpenCV 4.6 takes the padding byte of a 32-bit BMP with BI_BITFIELDS for alpha when the
    // header has no alpha mask (40- and 52-byte headers): that would make it transparent.
    cv::Mat bgr;
    cv::cvtColor(decoded, bgr, cv::COLOR_BGRA2BGR);
    decoded = bgr;
  }
  // Formats whose header is not parsed (GIF, JPEG 2000, ...) are checked here, after decoding;
  // the others again, which costs nothing.
  KILN_RETURN_IF_ERROR(CheckPixelLimit(decoded.cols, decoded.rows, options));

  if (full_size != nullptr) *full_size = decoded.size();
  try {
    return Normalise(decoded, options);
  } catch (const cv::Exception& e) {
    return Status::Internal(std::string("converting the decoded image failed: ") + e.what());
  }
}

}  // namespace

Result<cv::Mat> DecodeImage(std::string_view bytes, const std::string& path,
                            const DecodeOptions& options, cv::Size* full_size) {
  Result<cv::Mat> image = Decode(bytes, options, full_size);
  if (!image.ok()) return image.status().WithFile(path);
  return image;
}

}  // namespace kiln
