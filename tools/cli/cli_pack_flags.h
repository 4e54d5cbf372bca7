// The flags that `kiln pack` and `kiln plan` share: every option that decides which items are
// listed and which bytes a record gets (size, dtype, compression, shuffle seed, class map...),
// as typed, and their translation into PackOptions. `kiln pack --plan` takes the plan's values
// for the ones not given (ApplyPlanToFlags).
// Thread safety: called from main's thread only.
#ifndef KILN_TOOLS_CLI_CLI_PACK_FLAGS_H_
#define KILN_TOOLS_CLI_CLI_PACK_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "formats/status.h"
#include "tools/pack/pack_options.h"
#include "tools/pack/pack_plan.h"

namespace kiln {

// The flags of `kiln pack` (and the subset `kiln plan` declares) as typed; PackOptionsFromFlags
// turns the compound ones into options.
struct PackFlags {
  std::string input, output, root, size = "224", crop = "center", layout = "hwc", dtype = "uint8";
  std::string codec = "none";
  uint32_t max_side = 0;
  std::string compress = "none", shard_size = "128MiB", on_error = "skip", mean, std_dev;
  std::string format = "shards";
  uint32_t channels = 3, resize = 0, threads = 0;
  uint64_t max_pixels = DecodeOptions{}.max_pixels;
  int64_t shuffle_seed = -1;
  bool json = false, overwrite = false, resume = false, exact_decode = false;
  std::string classes_file, classes_from;
  std::string image_ext, label_from = "cls";
  std::string feature_image = TFRecordListOptions{}.feature_image;
  std::string feature_label = TFRecordListOptions{}.feature_label;
  std::string feature_key;
  std::string part;     // "" (not a part), "auto", or the index
  std::string staging;  // OUTPUT at a URL: where the dataset is packed before the upload
  uint32_t of = 0;      // 0 = not given
  std::string plan;     // --plan PLAN.json ("" = none)
};

// Declares the flags that decide the listing and the record bytes of ImageFolder and list-file
// input (--root, --size ... --classes-from) on `command`, bound to `f`.
void DeclareRecordFlags(CLI::App* command, PackFlags* f);

// Returns PackOptions from the flags (everything but --part/--of, --plan and the tar and TFRecord
// flags that need the image plugin). Errors: InvalidArgument naming the flag; those of
// ReadClassNames and Manifest::Read for --classes / --classes-from.
Result<PackOptions> PackOptionsFromFlags(const PackFlags& f);

// Sets each flag of the plan's options that `command` was not given to the plan's value, so that
// `kiln pack --plan PLAN.json --part I OUT` packs with the plan's options; a flag that was given
// keeps its value (Pack then refuses it if it differs from the plan's, naming both). Errors:
// Corruption naming `plan_path` for an option value of the wrong type.
Status ApplyPlanToFlags(const PackPlan& plan, const std::string& plan_path, const CLI::App& command,
                        PackFlags* f);

}  // namespace kiln

#endif  // KILN_TOOLS_CLI_CLI_PACK_FLAGS_H_
