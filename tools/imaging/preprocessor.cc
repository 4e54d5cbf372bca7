#include "tools/imaging/preprocessor.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <opencv2/imgproc.hpp>
#include <vector>

namespace kiln {
namespace {

std::string SizeString(uint64_t width, uint64_t height) {
  return std::to_string(width) + " x " + std::to_string(height);
}

// Resamples `src` to width x height under the policy in the header: INTER_AREA for an axis
// that shrinks, bilinear for one that grows. INTER_LINEAR_EXACT is OpenCV's bilinear with
// bit-exact fixed-point arithmetic, so results do not depend on the CPU's SIMD level.
cv::Mat ResizeTo(const cv::Mat& src, int width, int height) {
  if (src.cols == width && src.rows == height) return src;
  const bool shrink_x = width <= src.cols;
  const bool shrink_y = height <= src.rows;
  cv::Mat out;
  if (shrink_x && shrink_y) {
    cv::resize(src, out, cv::Size(width, height), 0, 0, cv::INTER_AREA);
  } else if (!shrink_x && !shrink_y) {
    cv::resize(src, out, cv::Size(width, height), 0, 0, cv::INTER_LINEAR_EXACT);
  } else {
    // One axis shrinks, the other grows: area on the first keeps it anti-aliased, bilinear on
    // the second avoids INTER_AREA's nearest-like enlargement. Shrinking first keeps the
    // intermediate image small.
    cv::Mat tmp;
    const cv::Size mid = shrink_x ? cv::Size(width, src.rows) : cv::Size(src.cols, height);
    cv::resize(src, tmp, mid, 0, 0, cv::INTER_AREA);
    cv::resize(tmp, out, cv::Size(width, height), 0, 0, cv::INTER_LINEAR_EXACT);
  }
  return out;
}

// Little-endian bytes of every possible output element, per channel: table[(c * 256 + v) *
// element_bytes ...] is the encoding of input value v of channel c.
std::vector<uint8_t> BuildElementTable(const PreprocessOptions& options) {
  const uint32_t channels = options.schema.channels;
  const size_t element_bytes = DTypeSize(options.schema.dtype);
  std::vector<uint8_t> table(channels * 256 * element_bytes);
  if (options.schema.dtype == DType::kUint8) {
    for (uint32_t c = 0; c < channels; ++c) {
      for (int v = 0; v < 256; ++v) table[c * 256 + v] = static_cast<uint8_t>(v);
    }
    return table;
  }
  cv::Mat values(static_cast<int>(channels), 256, CV_32F);
  for (uint32_t c = 0; c < channels; ++c) {
    for (int v = 0; v < 256; ++v) {
      const double x = (v / 255.0 - double{options.mean[c]}) / double{options.std[c]};
      values.at<float>(static_cast<int>(c), v) = static_cast<float>(x);
    }
  }
  if (options.schema.dtype == DType::kFloat16) {
    cv::Mat halves;
    values.convertTo(halves, CV_16F);
    for (uint32_t c = 0; c < channels; ++c) {
      for (int v = 0; v < 256; ++v) {
        uint16_t bits;
        std::memcpy(&bits, halves.ptr(static_cast<int>(c)) + 2 * v, 2);
        uint8_t* dst = &table[(c * 256 + v) * 2];
        dst[0] = static_cast<uint8_t>(bits);
        dst[1] = static_cast<uint8_t>(bits >> 8);
      }
    }
  } else {
    for (uint32_t c = 0; c < channels; ++c) {
      for (int v = 0; v < 256; ++v) {
        uint32_t bits;
        const float f = values.at<float>(static_cast<int>(c), v);
        std::memcpy(&bits, &f, 4);
        uint8_t* dst = &table[(c * 256 + v) * 4];
        for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(bits >> (8 * i));
      }
    }
  }
  return table;
}

// Writes the 8-bit `crop` (schema height x width) at `out` in the schema's layout and dtype.
void WriteSample(const cv::Mat& crop, const PreprocessOptions& options, uint8_t* out) {
  const TensorSchema& schema = options.schema;
  const size_t channels = schema.channels;
  const size_t height = schema.height;
  const size_t width = schema.width;
  const size_t element_bytes = DTypeSize(schema.dtype);
  if (schema.dtype == DType::kUint8 && schema.layout == Layout::kHWC) {
    for (size_t y = 0; y < height; ++y) {
      std::memcpy(out + y * width * channels, crop.ptr<uint8_t>(static_cast<int>(y)),
                  width * channels);
    }
    return;
  }
  if (schema.dtype == DType::kUint8 && schema.layout == Layout::kCHW) {
    // uint8 values map to themselves: deinterleave straight into the channel planes (one pass,
    // vectorised by OpenCV) instead of a table lookup and memcpy call per element.
    std::vector<cv::Mat> planes;
    for (size_t c = 0; c < channels; ++c) {
      planes.emplace_back(static_cast<int>(height), static_cast<int>(width), CV_8UC1,
                          out + c * height * width);
    }
    cv::split(crop, planes);  // planes already have crop's size and type: no reallocation
    return;
  }
  const std::vector<uint8_t> table = BuildElementTable(options);
  for (size_t y = 0; y < height; ++y) {
    const uint8_t* row = crop.ptr<uint8_t>(static_cast<int>(y));
    for (size_t x = 0; x < width; ++x) {
      for (size_t c = 0; c < channels; ++c) {
        const size_t index = schema.layout == Layout::kHWC ? (y * width + x) * channels + c
                                                           : (c * height + y) * width + x;
        std::memcpy(out + index * element_bytes,
                    &table[(c * 256 + row[x * channels + c]) * element_bytes], element_bytes);
      }
    }
  }
}

}  // namespace

Status ValidatePreprocessOptions(const PreprocessOptions& options) {
  Status schema_status = options.schema.Validate();
  if (!schema_status.ok()) {
    return Status::InvalidArgument("preprocess schema " + options.schema.ShapeString() +
                                   " is not valid: " + schema_status.message());
  }
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(options.mean[c])) {
      return Status::InvalidArgument("mean[" + std::to_string(c) + "] is not finite");
    }
    if (!std::isfinite(options.std[c]) || options.std[c] <= 0.0f) {
      return Status::InvalidArgument("std[" + std::to_string(c) + "] is " +
                                     std::to_string(options.std[c]) +
                                     "; it must be finite and positive");
    }
    // Every normalised value, (v/255 - mean)/std for v in [0, 255], must fit float16's range.
    constexpr double kFloat16Max = 65504.0;
    const double extreme = std::max(std::abs((0.0 - options.mean[c]) / options.std[c]),
                                    std::abs((1.0 - options.mean[c]) / options.std[c]));
    if (options.schema.dtype == DType::kFloat16 && extreme > kFloat16Max) {
      return Status::InvalidArgument("mean/std of channel " + std::to_string(c) +
                                     " give values up to " + std::to_string(extreme) +
                                     ", beyond float16's largest finite value 65504");
    }
  }
  return Status::Ok();
}

namespace {

// ResizedSize without the file name: its messages are the bare reasons.
Result<cv::Size> ResizeTarget(uint64_t src_w, uint64_t src_h, const PreprocessOptions& options) {
  const TensorSchema& schema = options.schema;
  if (src_w == 0 || src_h == 0) {
    return Status::InvalidArgument("image of " + SizeString(src_w, src_h));
  }

  // Size after the resize, before the crop.
  uint64_t new_w = schema.width;
  uint64_t new_h = schema.height;
  if (options.crop == CropMode::kCenter) {
    if (options.resize_shorter == 0) {
      // Smallest aspect-keeping cover: the axis with the larger scale factor lands exactly on
      // the target, the other is truncated and, as its exact value is >= its target, stays so.
      if (uint64_t{schema.width} * src_h >= uint64_t{schema.height} * src_w) {
        new_h = src_h * schema.width / src_w;
      } else {
        new_w = src_w * schema.height / src_h;
      }
    } else if (src_w <= src_h) {  // torchvision: if w <= h, ow = size, oh = int(size * h / w).
      new_w = options.resize_shorter;
      new_h = src_h * options.resize_shorter / src_w;
    } else {
      new_h = options.resize_shorter;
      new_w = src_w * options.resize_shorter / src_h;
    }
    new_w = std::max<uint64_t>(new_w, 1);
    new_h = std::max<uint64_t>(new_h, 1);
  }
  // A 10000 x 1 image with a shorter side of 256 would need 2560000 x 256 pixels: refuse it
  // here, before cv::resize allocates anything.
  if ((options.max_pixels != 0 && new_w * new_h > options.max_pixels) || new_w > INT_MAX ||
      new_h > INT_MAX) {
    return Status::InvalidArgument(
        "resizing " + SizeString(src_w, src_h) + " gives " + SizeString(new_w, new_h) + " = " +
        std::to_string(new_w * new_h) + " pixels, which exceeds the limit of " +
        std::to_string(options.max_pixels) + " (extreme aspect ratio?)");
  }
  if (new_w < schema.width || new_h < schema.height) {
    return Status::InvalidArgument("image of " + SizeString(src_w, src_h) + " resized to " +
                                   SizeString(new_w, new_h) + " is smaller than the crop of " +
                                   SizeString(schema.width, schema.height));
  }
  return cv::Size(static_cast<int>(new_w), static_cast<int>(new_h));
}

// Preprocess without the file name.
Status PreprocessImage(const cv::Mat& image, const PreprocessOptions& options, uint8_t* out,
                       cv::Size full_size) {
  KILN_RETURN_IF_ERROR(ValidatePreprocessOptions(options));
  const TensorSchema& schema = options.schema;
  if (image.empty() || image.depth() != CV_8U ||
      static_cast<uint32_t>(image.channels()) != schema.channels) {
    return Status::InvalidArgument("preprocess expects a non-empty 8-bit image with " +
                                   std::to_string(schema.channels) + " channels, got " +
                                   cv::typeToString(image.type()) + " of " +
                                   SizeString(image.cols, image.rows));
  }
  const uint64_t src_w = full_size.empty() ? image.cols : full_size.width;
  const uint64_t src_h = full_size.empty() ? image.rows : full_size.height;
  KILN_ASSIGN_OR_RETURN(const cv::Size resized_size, ResizeTarget(src_w, src_h, options));
  const uint64_t new_w = resized_size.width, new_h = resized_size.height;
  try {
    const cv::Mat resized = ResizeTo(image, static_cast<int>(new_w), static_cast<int>(new_h));
    const int x0 = static_cast<int>((new_w - schema.width) / 2);
    const int y0 = static_cast<int>((new_h - schema.height) / 2);
    const cv::Mat crop =
        resized(cv::Rect(x0, y0, static_cast<int>(schema.width), static_cast<int>(schema.height)));
    WriteSample(crop, options, out);
  } catch (const cv::Exception& e) {
    return Status::Internal("resizing " + SizeString(src_w, src_h) + " to " +
                            SizeString(new_w, new_h) + " failed: " + e.what());
  }
  return Status::Ok();
}

}  // namespace

Result<cv::Size> ResizedSize(uint64_t src_w, uint64_t src_h, const PreprocessOptions& options,
                             const std::string& path) {
  Result<cv::Size> size = ResizeTarget(src_w, src_h, options);
  if (!size.ok()) return size.status().WithFile(path);
  return size;
}

Status Preprocess(const cv::Mat& image, const PreprocessOptions& options, const std::string& path,
                  uint8_t* out, cv::Size full_size) {
  return PreprocessImage(image, options, out, full_size).WithFile(path);
}

}  // namespace kiln
