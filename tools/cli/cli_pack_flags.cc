#include "tools/cli/cli_pack_flags.h"

#include <array>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/format_registry.h"
#include "formats/manifest.h"
#include "tools/cli/cli_parsing.h"
#include "tools/sources/source_listing.h"

namespace kiln {
namespace {

void DeclareImageFlags(CLI::App* command, PackFlags* f) {
  command->add_option("--size", f->size, "Final size H or HxW (default 224)");
  command->add_option("--resize", f->resize,
                      "Shorter side before the crop (default: cover --size)");
  command->add_option("--crop", f->crop, "center or none (resize to --size, aspect not kept)")
      ->check(CLI::IsMember({"center", "none"}));
  command->add_option("--channels", f->channels, "1 (grey) or 3 (RGB)")
      ->check(CLI::IsMember({1, 3}));
  command->add_option("--layout", f->layout, "hwc or chw")->check(CLI::IsMember({"hwc", "chw"}));
  command->add_option("--dtype", f->dtype, "uint8, float16 or float32")
      ->check(CLI::IsMember({"uint8", "float16", "float32"}));
  command->add_option("--mean", f->mean,
                      "Per-channel mean in [0,1] for float dtypes, e.g. 0.485,0.456,0.406");
  command->add_option("--std", f->std_dev,
                      "Per-channel std for float dtypes, e.g. 0.229,0.224,0.225");
}

void DeclareStorageFlags(CLI::App* command, PackFlags* f) {
  // Every format of the registry is a choice; one not built in is refused by Pack, naming why.
  std::string names = StorageFormatNamesText();
  names.replace(0, std::string("shards").size(), "shards (default)");
  command->add_option("--format", f->format, "Storage format: " + names)
      ->check(CLI::IsMember(StorageFormatNames(/*compiled_only=*/false)));
  command->add_option("--shard-size", f->shard_size,
                      "Maximum shard size, e.g. 64MiB (default 128MiB)");
  command->add_option("--compress", f->compress, "none, zstd or zstd:LEVEL (per record)");
  command->add_option("--codec", f->codec,
                      "none (tensors) or jpeg[:QUALITY] (one JPEG per record, decoded and resized "
                      "by the reader; needs --max-side)");
  command->add_option("--max-side", f->max_side,
                      "--codec jpeg: longest image side in pixels (aspect ratio kept)");
  command->add_option("--shuffle-seed", f->shuffle_seed,
                      "Shuffle samples at write time with this seed");
  command
      ->add_option("--on-error", f->on_error,
                   "skip (report and go on) or fail (stop, write nothing)")
      ->check(CLI::IsMember({"skip", "fail"}));
  command->add_option("--max-pixels", f->max_pixels,
                      "Refuse images with more pixels (0: no limit)");
  command->add_flag("--exact-decode", f->exact_decode,
                    "Decode JPEGs at full size (default: shrink on load, at the largest 1/2, 1/4 "
                    "or 1/8 IDCT scale that keeps twice the resize target; "
                    "tools/imaging/decode_policy.md)");
}

// Returns the JSON value's text as a flag would be typed: strings without quotes.
std::string FlagText(const nlohmann::json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// "a,b,c" of a three-number array, "" when it holds the defaults (so uint8 needs no --mean).
std::string ChannelText(const nlohmann::json& values, const std::array<float, 3>& defaults) {
  const std::array<float, 3> v = values.get<std::array<float, 3>>();
  if (v == defaults) return "";
  return FlagText(values[0]) + "," + FlagText(values[1]) + "," + FlagText(values[2]);
}

void ApplyPlanValue(const std::string& flag, const nlohmann::json& v, PackFlags* f) {
  const PreprocessOptions defaults;
  if (flag == "--format") f->format = v.get<std::string>();
  if (flag == "--size") f->size = v.get<std::string>();
  if (flag == "--resize") f->resize = v.get<uint32_t>();
  if (flag == "--crop") f->crop = v.get<std::string>();
  if (flag == "--channels") f->channels = v.get<uint32_t>();
  if (flag == "--layout") f->layout = v.get<std::string>();
  if (flag == "--dtype") f->dtype = v.get<std::string>();
  if (flag == "--mean") f->mean = ChannelText(v, defaults.mean);
  if (flag == "--std") f->std_dev = ChannelText(v, defaults.std);
  if (flag == "--compress") f->compress = v.get<std::string>();
  if (flag == "--codec") f->codec = v.get<std::string>();
  if (flag == "--max-side") f->max_side = v.get<uint32_t>();
  if (flag == "--shard-size") f->shard_size = FlagText(v);
  if (flag == "--shuffle-seed") f->shuffle_seed = v.is_null() ? -1 : v.get<int64_t>();
  if (flag == "--max-pixels") f->max_pixels = v.get<uint64_t>();
  if (flag == "--on-error") f->on_error = v.get<std::string>();
  if (flag == "--exact-decode") f->exact_decode = v.get<bool>();
}

}  // namespace

void DeclareRecordFlags(CLI::App* command, PackFlags* f) {
  command->add_option("--root", f->root, "Root of the list file's paths (default: its directory)");
  DeclareImageFlags(command, f);
  DeclareStorageFlags(command, f);
  CLI::Option* classes =
      command->add_option("--classes", f->classes_file,
                          "Class names, one a line, in label order: pins the class ids (a folder "
                          "not listed there is refused)");
  command
      ->add_option("--classes-from", f->classes_from,
                   "Pin the class ids to the classes of this existing kiln dataset")
      ->excludes(classes);
}

Result<PackOptions> PackOptionsFromFlags(const PackFlags& f) {
  PackOptions o;
  o.input = f.input;
  o.output = f.output;
  o.root = f.root;
  o.threads = f.threads;
  o.overwrite = f.overwrite;
  o.resume = f.resume;
  o.format = f.format;
  if (!ParseOnError(f.on_error, &o.on_error)) {
    return Status::InvalidArgument("--on-error " + f.on_error + " must be skip or fail");
  }
  o.decode.max_pixels = f.max_pixels;
  o.exact_decode = f.exact_decode;
  o.tar.label_from = f.label_from;
  o.tfrecord.feature_image = f.feature_image;
  o.tfrecord.feature_label = f.feature_label;
  o.tfrecord.feature_key = f.feature_key;
  if (f.shuffle_seed >= 0) o.shuffle_seed = static_cast<uint64_t>(f.shuffle_seed);
  KILN_RETURN_IF_ERROR(ParsePackFlags(f.size, f.resize, f.crop, f.channels, f.layout, f.dtype,
                                      f.mean, f.std_dev, f.shard_size, f.compress, &o));
  if (f.codec != "none") {
    KILN_ASSIGN_OR_RETURN(o.jpeg.quality, JpegRecordOptions::ParseQuality(f.codec));
    if (f.max_side == 0) {
      return Status::InvalidArgument("--codec " + f.codec +
                                     " needs --max-side N: the longest side of the stored images");
    }
    if (f.size != PackFlags{}.size) {
      return Status::InvalidArgument("--size does not apply to --codec " + f.codec +
                                     ": records keep their aspect ratio (use --max-side), and "
                                     "the reader resizes them to its output size");
    }
    o.jpeg.max_side = f.max_side;
    o.preprocess.schema.height = o.preprocess.schema.width = f.max_side;
  } else if (f.max_side != 0) {
    return Status::InvalidArgument("--max-side applies to --codec jpeg only");
  }
  if (!f.classes_file.empty()) {
    KILN_ASSIGN_OR_RETURN(o.class_map, ReadClassNames(f.classes_file));
    o.class_map_origin = f.classes_file;
  } else if (!f.classes_from.empty()) {
    Result<Manifest> manifest = ReadDatasetManifest(f.classes_from);  // a URL too
    if (!manifest.ok()) {
      return Status::InvalidArgument("--classes-from " + f.classes_from + ": " +
                                     manifest.status().message());
    }
    if (manifest->classes.empty()) {
      return Status::InvalidArgument("--classes-from " + f.classes_from +
                                     ": that dataset's manifest names no classes");
    }
    o.class_map = manifest->classes;
    o.class_map_origin = "dataset " + f.classes_from;
  }
  return o;
}

Status ApplyPlanToFlags(const PackPlan& plan, const std::string& plan_path, const CLI::App& command,
                        PackFlags* f) {
  const nlohmann::json options = nlohmann::json::parse(plan.options_json, nullptr, false);
  for (const auto& [flag, value] : options.items()) {
    const CLI::Option* given = command.get_option_no_throw(flag);
    if (flag.rfind("--", 0) != 0 || (given != nullptr && given->count() > 0)) continue;
    try {
      ApplyPlanValue(flag, value, f);
    } catch (const nlohmann::json::exception& e) {
      return Status::Corruption(plan_path + ": option " + flag + " = " + value.dump() +
                                " has the wrong type (" + e.what() + ")");
    }
  }
  return Status::Ok();
}

}  // namespace kiln
