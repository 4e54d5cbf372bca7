#include "tools/pack/pack_option_table.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

// One option: its names, its value as PartOptionsJson writes it, and, where the manifest holds
// it in another form, that form.
struct Row {
  PackOptionInfo info;
  Json (*value)(const PackOptions& o);
  // The manifest's form (null: `value`) and its place among the preprocessing keys (-1: none).
  Json (*manifest_value)(const PackOptions& o);
  int manifest_position;
  // Rows left out of every JSON object while this returns false (null: always in), so that the
  // objects of packs that do not use the option keep the bytes they had before it existed.
  bool (*present)(const PackOptions& o) = nullptr;
};

bool Present(const Row& row, const PackOptions& o) {
  return row.present == nullptr || row.present(o);
}
bool JpegOn(const PackOptions& o) { return o.jpeg.enabled(); }

const std::vector<Row>& Rows() {
  // The order of the rows is the order of PartOptionsJson's keys, which the partition records
  // and plans in tests/data hold byte for byte: append new rows with a part_key after the last
  // of them.
  static const std::vector<Row> rows = {
      {{"format", "--format", "--format", "", true},
       [](const PackOptions& o) { return Json(o.format); },
       nullptr,
       -1},
      {{"size", "--size", "--size", "size", true},
       [](const PackOptions& o) {
         const TensorSchema& s = o.preprocess.schema;
         return Json(std::to_string(s.height) + "x" + std::to_string(s.width));
       },
       [](const PackOptions& o) {
         return Json::array({o.preprocess.schema.height, o.preprocess.schema.width});
       },
       0},
      {{"resize", "--resize", "--resize", "resize_shorter", true},
       [](const PackOptions& o) { return Json(o.preprocess.resize_shorter); },
       nullptr,
       1},
      {{"crop", "--crop", "--crop", "crop", true},
       [](const PackOptions& o) { return Json(CropModeName(o.preprocess.crop)); },
       nullptr,
       2},
      {{"channels", "--channels", "--channels", "channels", true},
       [](const PackOptions& o) { return Json(o.preprocess.schema.channels); },
       nullptr,
       4},
      {{"layout", "--layout", "--layout", "layout", true},
       [](const PackOptions& o) { return Json(LayoutName(o.preprocess.schema.layout)); },
       nullptr,
       6},
      {{"dtype", "--dtype", "--dtype", "dtype", true},
       [](const PackOptions& o) { return Json(DTypeName(o.preprocess.schema.dtype)); },
       nullptr,
       5},
      {{"mean", "--mean", "--mean", "mean", true},
       [](const PackOptions& o) {
         const auto& m = o.preprocess.mean;
         return Json::array({m[0], m[1], m[2]});
       },
       nullptr,
       7},
      {{"std", "--std", "--std", "std", true},
       [](const PackOptions& o) {
         const auto& s = o.preprocess.std;
         return Json::array({s[0], s[1], s[2]});
       },
       nullptr,
       8},
      {{"compress", "--compress", "--compress", "", true},
       [](const PackOptions& o) { return Json(o.compression.ToString()); },
       nullptr,
       -1},
      {{"shard_size", "--shard-size", "--shard-size", "", true},
       [](const PackOptions& o) { return Json(o.shard_size_bytes); },
       nullptr,
       -1},
      {{"shuffle_seed", "--shuffle-seed", "--shuffle-seed", "", true},
       [](const PackOptions& o) { return o.shuffle_seed ? Json(*o.shuffle_seed) : Json(nullptr); },
       nullptr,
       -1},
      {{"max_pixels", "--max-pixels", "--max-pixels", "max_pixels", true},
       [](const PackOptions& o) { return Json(o.decode.max_pixels); },
       nullptr,
       12},
      {{"on_error", "--on-error", "--on-error", "", false},
       [](const PackOptions& o) { return Json(OnErrorName(o.on_error)); },
       nullptr,
       -1},
      {{"exact_decode", "--exact-decode", "--exact-decode", "jpeg_decode", true},
       [](const PackOptions& o) { return Json(o.exact_decode); },
       [](const PackOptions& o) { return Json(o.exact_decode ? "exact" : "shrink-on-load"); },
       10},
      {{"image_ext", "--image-ext", "--image-ext", "", true},
       [](const PackOptions& o) { return Json(o.tar.image_exts); },
       nullptr,
       -1},
      {{"label_from", "--label-from", "--label-from", "", true},
       [](const PackOptions& o) { return Json(o.tar.label_from); },
       nullptr,
       -1},
      {{"feature_image", "--feature-image", "--feature-image", "", false},
       [](const PackOptions& o) { return Json(o.tfrecord.feature_image); },
       nullptr,
       -1},
      {{"feature_label", "--feature-label", "--feature-label", "", false},
       [](const PackOptions& o) { return Json(o.tfrecord.feature_label); },
       nullptr,
       -1},
      {{"feature_key", "--feature-key", "--feature-key", "", false},
       [](const PackOptions& o) { return Json(o.tfrecord.feature_key); },
       nullptr,
       -1},
      // Set by Pack itself, not by a flag, but recorded so that two parts' bytes agree.
      {{"", "", "alpha background", "alpha_background", true},
       [](const PackOptions& o) { return Json(o.decode.background); },
       nullptr,
       11},
      {{"", "", "resized max pixels", "", true},
       [](const PackOptions& o) { return Json(o.preprocess.max_pixels); },
       nullptr,
       -1},
      // JPEG records: in the JSON objects only when on.
      {{"codec", "--codec", "--codec", "codec", true},
       [](const PackOptions& o) { return Json(o.jpeg.enabled() ? o.jpeg.ToString() : "none"); },
       nullptr,
       13,
       JpegOn},
      {{"max_side", "--max-side", "--max-side", "max_side", true},
       [](const PackOptions& o) { return Json(o.jpeg.max_side); },
       nullptr,
       14,
       JpegOn},
      // Options that decide neither the items nor their bytes.
      {{"input", "", "", "", false},
       [](const PackOptions& o) { return Json(o.input); },
       nullptr,
       -1},
      {{"output", "", "", "", false},
       [](const PackOptions& o) { return Json(o.output); },
       nullptr,
       -1},
      {{"root", "--root", "", "", false},
       [](const PackOptions& o) { return Json(o.root); },
       nullptr,
       -1},
      {{"threads", "--threads", "", "", false},
       [](const PackOptions& o) { return Json(o.threads); },
       nullptr,
       -1},
      {{"overwrite", "--overwrite", "", "", false},
       [](const PackOptions& o) { return Json(o.overwrite); },
       nullptr,
       -1},
      {{"resume", "--resume", "", "", false},
       [](const PackOptions& o) { return Json(o.resume); },
       nullptr,
       -1},
  };
  return rows;
}

// The manifest's fixed descriptions, with their places among the preprocessing keys.
struct FixedEntry {
  int position;
  const char* key;
  const char* text;
};
constexpr FixedEntry kFixedPreprocessing[] = {
    {3, "interpolation", "area when shrinking, linear when enlarging"},
    {9, "decode_policy", "tools/imaging/decode_policy.md"},
};

}  // namespace

const std::vector<PackOptionInfo>& PackOptionTable() {
  static const std::vector<PackOptionInfo> table = [] {
    std::vector<PackOptionInfo> t;
    for (const Row& row : Rows()) t.push_back(row.info);
    return t;
  }();
  return table;
}

PackOptions DefaultPackOptions() {
  PackOptions o;
  o.preprocess.schema.height = 224;
  o.preprocess.schema.width = 224;
  o.preprocess.schema.channels = 3;
  return o;
}

std::string PackOptionValuesJson(const PackOptions& options) {
  Json j = Json::object();
  for (const Row& row : Rows()) {
    if (!Present(row, options)) continue;
    j[*row.info.name != '\0' ? row.info.name : row.info.part_key] = row.value(options);
  }
  return j.dump();
}

std::string PartOptionsJson(const PackOptions& options) {
  Json j;
  for (const Row& row : Rows()) {
    if (*row.info.part_key != '\0' && Present(row, options)) {
      j[row.info.part_key] = row.value(options);
    }
  }
  return j.dump();
}

std::string PreprocessingJson(const PackOptions& options) {
  std::vector<std::pair<int, std::pair<const char*, Json>>> entries;
  for (const Row& row : Rows()) {
    if (row.manifest_position < 0 || !Present(row, options)) continue;
    entries.push_back(
        {row.manifest_position,
         {row.info.manifest_key,
          (row.manifest_value != nullptr ? row.manifest_value : row.value)(options)}});
  }
  for (const FixedEntry& e : kFixedPreprocessing)
    entries.push_back({e.position, {e.key, Json(e.text)}});
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  Json j;
  for (auto& [position, entry] : entries) j[entry.first] = std::move(entry.second);
  return j.dump();
}

}  // namespace kiln
