// kiln::TensorSchema: the one fixed tensor shape, dtype and layout that every sample of a
// dataset has. Fixed shape per dataset is what lets a batch be one contiguous block.
//
// Thread safety: a plain value.
#ifndef KILN_FORMATS_TENSOR_SCHEMA_H_
#define KILN_FORMATS_TENSOR_SCHEMA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "formats/status.h"

namespace kiln {

// Element type of a sample tensor. The numeric values are stored on disk (shard header byte 24,
// see formats/shards/shard_format.md section 2): never renumber them.
enum class DType : uint8_t {
  kUint8 = 1,    // 1 byte per element, 0..255.
  kFloat16 = 2,  // IEEE 754 binary16, little-endian.
  kFloat32 = 3,  // IEEE 754 binary32, little-endian.
};

// Memory order of one sample. Stored on disk (shard header byte 25): never renumber.
enum class Layout : uint8_t {
  kHWC = 1,  // height, width, channels (channels fastest): what image decoders produce.
  kCHW = 2,  // channels, height, width: what PyTorch convolution layers consume.
};

// Returns the size in bytes of one element of `dtype` (1, 2 or 4).
size_t DTypeSize(DType dtype);
// Returns "uint8", "float16" or "float32".
std::string_view DTypeName(DType dtype);
// Parses a name produced by DTypeName. Errors: InvalidArgument naming the text.
Result<DType> ParseDType(std::string_view name);
// Returns "hwc" or "chw".
std::string_view LayoutName(Layout layout);
// Parses "hwc" or "chw" (case-insensitive). Errors: InvalidArgument naming the text.
Result<Layout> ParseLayout(std::string_view name);

struct TensorSchema {
  DType dtype = DType::kUint8;
  Layout layout = Layout::kHWC;
  uint32_t height = 0;    // Rows, >= 1.
  uint32_t width = 0;     // Columns, >= 1.
  uint32_t channels = 0;  // 1 (grey) or 3 (RGB, in that order).

  // Returns height * width * channels.
  uint64_t elements() const { return uint64_t{height} * width * channels; }
  // Returns the size of one sample in bytes: elements() * DTypeSize(dtype).
  uint64_t sample_bytes() const { return elements() * DTypeSize(dtype); }
  // Returns the shape in layout order, for example "[28, 28, 1]" for HWC.
  std::string ShapeString() const;
  // Returns OK when every field is in range (sizes >= 1, channels 1 or 3, sample < 4 GiB).
  Status Validate() const;

  bool operator==(const TensorSchema& other) const {
    return dtype == other.dtype && layout == other.layout && height == other.height &&
           width == other.width && channels == other.channels;
  }
  bool operator!=(const TensorSchema& other) const { return !(*this == other); }
};

}  // namespace kiln

#endif  // KILN_FORMATS_TENSOR_SCHEMA_H_
