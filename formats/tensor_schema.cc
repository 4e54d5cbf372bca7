#include "formats/tensor_schema.h"

#include <algorithm>
#include <cctype>

namespace kiln {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return 1;
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return "uint8";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat32:
      return "float32";
  }
  return "invalid";
}

static std::string Lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Result<DType> ParseDType(std::string_view name) {
  const std::string lower = Lower(name);
  if (lower == "uint8") return DType::kUint8;
  if (lower == "float16") return DType::kFloat16;
  if (lower == "float32") return DType::kFloat32;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "' (expected uint8, float16 or float32)");
}

std::string_view LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kHWC:
      return "hwc";
    case Layout::kCHW:
      return "chw";
  }
  return "invalid";
}

Result<Layout> ParseLayout(std::string_view name) {
  const std::string lower = Lower(name);
  if (lower == "hwc") return Layout::kHWC;
  if (lower == "chw") return Layout::kCHW;
  return Status::InvalidArgument("unknown layout '" + std::string(name) +
                                 "' (expected hwc or chw)");
}

std::string TensorSchema::ShapeString() const {
  const std::string h = std::to_string(height), w = std::to_string(width),
                    c = std::to_string(channels);
  if (layout == Layout::kCHW) return "[" + c + ", " + h + ", " + w + "]";
  return "[" + h + ", " + w + ", " + c + "]";
}

Status TensorSchema::Validate() const {
  if (DTypeSize(dtype) == 0) return Status::InvalidArgument("schema has an invalid dtype");
  if (layout != Layout::kHWC && layout != Layout::kCHW) {
    return Status::InvalidArgument("schema has an invalid layout");
  }
  if (height == 0 || width == 0) {
    return Status::InvalidArgument("schema size " + std::to_string(height) + "x" +
                                   std::to_string(width) + " must be at least 1x1");
  }
  if (channels != 1 && channels != 3) {
    return Status::InvalidArgument("schema channels " + std::to_string(channels) +
                                   " must be 1 or 3");
  }
  if (sample_bytes() >= (uint64_t{1} << 32)) {
    return Status::InvalidArgument("schema sample of " + std::to_string(sample_bytes()) +
                                   " bytes exceeds the 4 GiB record limit");
  }
  return Status::Ok();
}

}  // namespace kiln
