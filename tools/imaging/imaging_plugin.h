// The decoder-dependent half of the `kiln` command line, as a plugin loaded at run time.
//
// `kiln pack` and `kiln show` decode and encode images (OpenCV, libjpeg-turbo, libgif, libwebp,
// oneTBB: about 150 shared libraries, 70-140 ms of start-up). The other subcommands (verify,
// inspect, bench, merge, help) need none of them, so the `kiln` executable does not link them:
// the code that does (tools/pack/packer.h, tools/imaging/sample_renderer.h) is built into the
// module `kiln_imaging.so`, which LoadImagingPlugin() opens (dlopen) the first time pack or show
// runs; `kiln stats --png` draws its picture with it too (tools/imaging/wait_plot.h).
//
// Where the plugin lives (the executable's own directory found from /proc/self/exe):
//   - build tree: beside the executable, build/tools/kiln_imaging.so;
//   - installed:  LIBDIR/kiln/kiln_imaging.so, found through the path from BINDIR to it
//     (`cmake --install` puts kiln in BINDIR), e.g. PREFIX/bin/../lib/kiln/kiln_imaging.so.
// The plugin and the executable come from one build: the plugin exports one C symbol,
// kImagingPluginSymbol, returning an ImagingPlugin whose abi_key must equal the executable's
// ImagingPluginAbiKey() (version and the sizes of the structs that cross), else it is refused.
// Thread safety: LoadImagingPlugin may be called from any thread; the returned table is
// immutable and valid until the process exits (the module is never closed).
#ifndef KILN_TOOLS_IMAGING_IMAGING_PLUGIN_H_
#define KILN_TOOLS_IMAGING_IMAGING_PLUGIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/version.h"
#include "reader/augmenter.h"
#include "tools/imaging/wait_plot.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/packer.h"

namespace kiln {

// The module's file name and its one exported symbol (extern "C", returns const ImagingPlugin*).
inline constexpr char kImagingPluginFile[] = "kiln_imaging.so";
inline constexpr char kImagingPluginSymbol[] = "kiln_imaging_plugin";

// Identifies the build: the version and the sizes of the types passed across the boundary.
// A plugin from another build (another version, or changed structs) has another key.
inline std::string ImagingPluginAbiKey() {
  return std::string(kToolVersionString) + " " + std::to_string(sizeof(PackOptions)) + " " +
         std::to_string(sizeof(PackReport)) + " " + std::to_string(sizeof(PackPlan)) + " " +
         std::to_string(sizeof(Status)) + " " + std::to_string(sizeof(std::string)) + " " +
         std::to_string(sizeof(WaitPlot));
}

// The plugin's functions; each is the library function of the same name (tools/pack/packer.h,
// tools/imaging/sample_renderer.h, tools/sources/tar_source.h, tools/sources/tfrecord_source.h)
// with its contract.
struct ImagingPlugin {
  const char* abi_key;  // ImagingPluginAbiKey() of the plugin's build; stays first
  Result<PackReport> (*pack)(const PackOptions& options, const PackProgress& progress,
                             PackReport* failed);
  std::string (*pack_report_json)(const PackReport& report);
  std::string (*pack_failure_json)(const Status& status, int exit_code, const PackReport& report);
  std::vector<uint64_t> (*evenly_spaced_indices)(uint64_t num_samples, uint64_t count);
  Status (*render_samples)(const std::string& dir, const std::vector<uint64_t>& indices,
                           uint32_t columns, const std::string& png_path);
  Status (*render_augmented_draws)(const std::string& dir, uint64_t index,
                                   const AugmentOptions& augment, uint64_t seed, uint32_t draws,
                                   uint32_t columns, const std::string& png_path);
  Status (*validate_tar_list_options)(const TarListOptions& options);  // tools/sources/tar_source.h
  Result<std::vector<std::string>> (*parse_image_extensions)(const std::string& list);
  Status (*validate_tfrecord_list_options)(const TFRecordListOptions& options);
  Result<PackPlan> (*plan_pack)(const PackOptions& options, uint32_t parts);  // tools/pack/packer.h
  Status (*render_wait_plot)(const WaitPlot& plot,
                             const std::string& path);  // tools/imaging/wait_plot.h
};

// Returns the plugin, opening it on the first call. Errors: NotFound naming every path looked
// at when no kiln_imaging.so is there ("... is not installed"); Internal with the loader's
// message when it is there but cannot be opened (e.g. a missing libopencv_*.so) or does not
// match this executable's build.
Result<const ImagingPlugin*> LoadImagingPlugin();

}  // namespace kiln

#endif  // KILN_TOOLS_IMAGING_IMAGING_PLUGIN_H_
