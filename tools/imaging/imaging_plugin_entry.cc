// The entry point of kiln_imaging.so (tools/imaging/imaging_plugin.h): the table of the
// decoder-dependent functions that the `kiln` executable calls for pack and show.
#include "tools/imaging/imaging_plugin.h"
#include "tools/imaging/sample_renderer.h"
#include "tools/imaging/wait_plot.h"
#include "tools/pack/pack_plan.h"
#include "tools/pack/packer.h"
#include "tools/sources/tar_source.h"
#include "tools/sources/tfrecord_source.h"

namespace {

// Filled once; its abi_key points into a string that lives as long as the module.
const kiln::ImagingPlugin* MakePlugin() {
  static const std::string* abi_key = new std::string(kiln::ImagingPluginAbiKey());
  static const kiln::ImagingPlugin plugin = {
      abi_key->c_str(),
      &kiln::Pack,
      &kiln::PackReportJson,
      &kiln::PackFailureJson,
      &kiln::EvenlySpacedIndices,
      &kiln::RenderSamples,
      &kiln::RenderAugmentedDraws,
      &kiln::ValidateTarListOptions,
      &kiln::ParseImageExtensions,
      &kiln::ValidateTFRecordListOptions,
      &kiln::PlanPack,
      &kiln::RenderWaitPlot,
  };
  return &plugin;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const kiln::ImagingPlugin* kiln_imaging_plugin() {
  return MakePlugin();
}
