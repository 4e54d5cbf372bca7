// kiln show: writes one sample, a grid of evenly spaced samples, or a grid of augmented draws of
// one sample (what training sees of it, epoch by epoch), as a picture (PNG, JPEG, ...: the format
// OpenCV picks from the output's extension).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_parsing.h"
#include "tools/imaging/imaging_plugin.h"

namespace kiln {
namespace {

struct ShowFlags {
  std::string dataset;
  uint64_t index = 0;
  std::string grid;
  std::string png;
  CLI::Option* index_option = nullptr;  // set when --index was given
  // --draws: augmented draws of the --index sample, with the loader's augmentation options.
  uint32_t draws = 0;
  std::string crop, resized_crop, scale, ratio;
  std::string interpolation = "bilinear";
  bool flip = false;
  uint64_t seed = 0;
};

// Parses "MIN,MAX" (finite, 0 < MIN <= MAX) for --scale and --ratio.
Status ParseRange(const std::string& flag, const std::string& text, double* lo, double* hi) {
  const size_t comma = text.find(',');
  char* end = nullptr;
  if (comma != std::string::npos) {
    const std::string a = text.substr(0, comma), b = text.substr(comma + 1);
    *lo = std::strtod(a.c_str(), &end);
    const bool a_ok = !a.empty() && *end == '\0';
    *hi = std::strtod(b.c_str(), &end);
    if (a_ok && !b.empty() && *end == '\0' && std::isfinite(*lo) && std::isfinite(*hi) && *lo > 0 &&
        *lo <= *hi) {
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(flag + " '" + text +
                                 "': want MIN,MAX with 0 < MIN <= MAX (e.g. 0.08,1)");
}

// The loader's augmentation options from the --crop/--random-resized-crop/--scale/--ratio/--flip
// flags (checked against the dataset's schema by the renderer: AugmentedSchema).
Result<AugmentOptions> ParseAugmentFlags(const ShowFlags& flags) {
  AugmentOptions a;
  if (!flags.crop.empty()) {
    KILN_RETURN_IF_ERROR(ParseImageSize(flags.crop, &a.crop_height, &a.crop_width));
  }
  if (!flags.resized_crop.empty()) {
    KILN_RETURN_IF_ERROR(ParseImageSize(flags.resized_crop, &a.resize_height, &a.resize_width));
  }
  if (!flags.scale.empty()) {
    KILN_RETURN_IF_ERROR(ParseRange("--scale", flags.scale, &a.scale_min, &a.scale_max));
    if (a.scale_max > 1) return Status::InvalidArgument("--scale '" + flags.scale + "': MAX > 1");
  }
  if (!flags.ratio.empty()) {
    KILN_RETURN_IF_ERROR(ParseRange("--ratio", flags.ratio, &a.ratio_min, &a.ratio_max));
  }
  a.interpolation =
      flags.interpolation == "area" ? ResizeInterpolation::kArea : ResizeInterpolation::kBilinear;
  a.flip = flags.flip;
  return a;
}

// Returns the sample indices to draw: the one --index, or a --grid (default 4x8) of evenly
// spaced samples with its column count in `columns`.
Result<std::vector<uint64_t>> ShownIndices(const ImagingPlugin& plugin, const ShowFlags& flags,
                                           uint32_t* columns) {
  *columns = 1;
  if (flags.index_option->count() > 0) {
    KILN_ASSIGN_OR_RETURN(uint64_t n, CountSamples(flags.dataset));
    if (flags.index >= n) {
      return Status::InvalidArgument(
          "--index " + std::to_string(flags.index) + " is out of range: " + flags.dataset +
          " holds " + std::to_string(n) + " samples (0 to " + std::to_string(n - 1) + ")");
    }
    return std::vector<uint64_t>{flags.index};
  }
  uint32_t rows = 0;
  KILN_RETURN_IF_ERROR(ParseGrid(flags.grid.empty() ? "4x8" : flags.grid, &rows, columns));
  KILN_ASSIGN_OR_RETURN(uint64_t n, CountSamples(flags.dataset));
  return plugin.evenly_spaced_indices(n, uint64_t{rows} * *columns);
}

int RunShow(const ShowFlags& flags) {
  // The PNG encoder lives in the image plugin (tools/imaging/imaging_plugin.h), loaded only now.
  Result<const ImagingPlugin*> plugin = LoadImagingPlugin();
  if (!plugin.ok()) return FailCommand(plugin.status(), false);
  if (flags.draws > 0) {
    Result<AugmentOptions> augment = ParseAugmentFlags(flags);
    if (!augment.ok()) return FailCommand(augment.status(), false);
    const uint32_t columns = std::min<uint32_t>(flags.draws, 8);
    Status s = (*plugin)->render_augmented_draws(flags.dataset, flags.index, *augment, flags.seed,
                                                 flags.draws, columns, flags.png);
    if (!s.ok()) return FailCommand(s, false);
    std::printf("wrote %u augmented draws of sample %llu to %s\n", flags.draws,
                static_cast<unsigned long long>(flags.index), flags.png.c_str());
    return kExitOk;
  }
  uint32_t columns = 1;
  Result<std::vector<uint64_t>> indices = ShownIndices(**plugin, flags, &columns);
  if (!indices.ok()) return FailCommand(indices.status(), false);
  Status s = (*plugin)->render_samples(flags.dataset, *indices, columns, flags.png);
  if (!s.ok()) return FailCommand(s, false);
  std::printf("wrote %zu samples to %s\n", indices->size(), flags.png.c_str());
  return kExitOk;
}

}  // namespace

Subcommand AddShowCommand(CLI::App& app) {
  auto flags = std::make_shared<ShowFlags>();
  CLI::App* show = app.add_subcommand(
      "show",
      "Write samples as a picture (PNG, or JPEG for -o x.jpg: the extension picks the format)");
  show->add_option("dataset", flags->dataset, "Dataset directory")->required();
  flags->index_option = show->add_option("--index", flags->index, "One sample index");
  CLI::Option* grid = show->add_option(
      "--grid", flags->grid,
      "RxC grid of evenly spaced samples. Default without --index: 4x8 (32 samples)");
  flags->index_option->excludes(grid);
  CLI::Option* draws =
      show->add_option("--draws", flags->draws,
                       "N augmented draws of the --index sample, one per epoch 0..N-1, exactly "
                       "as the loader makes them (with --crop, --random-resized-crop, --flip)")
          ->check(CLI::Range(1u, 4096u));
  draws->needs(flags->index_option);
  // The loader's augmentation flags (kiln.Loader crop=, random_resized_crop=, scale=, ratio=,
  // interpolation=, flip=, seed=); only with --draws.
  for (CLI::Option* option : {
           show->add_option("--crop", flags->crop, "With --draws: random crop HxW"),
           show->add_option("--random-resized-crop", flags->resized_crop,
                            "With --draws: RandomResizedCrop to HxW (torchvision's)"),
           show->add_option("--scale", flags->scale,
                            "With --random-resized-crop: area fraction MIN,MAX (0.08,1)"),
           show->add_option("--ratio", flags->ratio,
                            "With --random-resized-crop: aspect ratio MIN,MAX (0.75,1.3333)"),
           show->add_option("--interpolation", flags->interpolation,
                            "With --random-resized-crop: bilinear (default) or area")
               ->check(CLI::IsMember({"bilinear", "area"})),
           show->add_flag("--flip", flags->flip, "With --draws: mirror with probability 1/2"),
           show->add_option("--seed", flags->seed, "With --draws: the loader's seed (0)"),
       }) {
    option->needs(draws);
  }
  show->add_option("-o,--output", flags->png,
                   "Picture to write: .png, .jpg/.jpeg (JPEG), or another extension OpenCV writes")
      ->required();
  show->footer(
      HelpFooter({"0   written", "1   the dataset cannot be read or the picture cannot be written",
                  "2   usage (an --index past the end included)"},
                 ""));
  return {show, [flags] { return RunShow(*flags); }};
}

}  // namespace kiln
