// kiln::PreprocessOptions: the options of the converter's preprocess stage (Preprocess,
// tools/imaging/preprocessor.h, which documents the resize policy), in a header of their own
// without OpenCV so that option structs elsewhere (tools/pack/pack_options.h) can hold them
// without pulling in OpenCV.
// Thread safety: plain data.
#ifndef KILN_TOOLS_IMAGING_PREPROCESS_OPTIONS_H_
#define KILN_TOOLS_IMAGING_PREPROCESS_OPTIONS_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "formats/tensor_schema.h"

namespace kiln {

enum class CropMode {
  kCenter,  // Resize keeping the aspect ratio, then take the centred schema-sized window.
  kNone,    // Resize straight to schema height x width (aspect ratio not kept), no crop.
};

// "center" or "none": the name `kiln pack --crop`, kiln.pack(crop=) and the manifest use.
inline const char* CropModeName(CropMode mode) {
  return mode == CropMode::kNone ? "none" : "center";
}
// Parses a CropModeName into *mode. Returns false (leaving *mode) for any other text.
inline bool ParseCropMode(std::string_view name, CropMode* mode) {
  if (name != "center" && name != "none") return false;
  *mode = name == "none" ? CropMode::kNone : CropMode::kCenter;
  return true;
}

struct PreprocessOptions {
  // Final shape, dtype and layout of every sample. Must pass TensorSchema::Validate().
  TensorSchema schema;
  // Length in pixels of the shorter side after the resize, before the crop (kCenter only).
  // 0 = the smallest aspect-keeping resize that covers schema height x width. Default: 0.
  uint32_t resize_shorter = 0;
  // Default: kCenter. With kNone, resize_shorter is ignored.
  CropMode crop = CropMode::kCenter;
  // Per-channel normalisation for float dtypes, in [0, 1] units, indexed R, G, B (only [0] is
  // used for grey): out = (v / 255 - mean[c]) / std[c], computed in double and rounded once to
  // the dtype. Ignored for uint8. Defaults: mean 0, std 1 (out = v / 255). std must be finite
  // and non-zero, mean finite.
  std::array<float, 3> mean{0, 0, 0};
  std::array<float, 3> std{1, 1, 1};
  // Refuses a resize whose result (before the crop) has more pixels than this, before
  // allocating it: a 10000 x 1 image resized to shorter side 256 would be 2560000 x 256.
  // 0 = no limit. Default: 178956970 (the decode limit).
  uint64_t max_pixels = 178956970;
};

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_PREPROCESS_OPTIONS_H_
