// kiln show: writes one sample, or a grid of evenly spaced samples, as a picture (PNG, JPEG, ...:
// the format OpenCV picks from the output's extension).
#include <cstdio>
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
};

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
