// kiln inspect: describes a dataset (schema, counts, files, backend details).
#include <iostream>
#include <memory>
#include <string>

#include "formats/inspector.h"
#include "tools/cli/cli_commands.h"

namespace kiln {
namespace {

struct InspectFlags {
  std::string dataset;
  bool json = false;
};

int RunInspect(const InspectFlags& flags) {
  Result<std::string> text = Inspect(flags.dataset, flags.json);
  if (!text.ok()) return FailCommand(text.status(), flags.json);
  std::cout << *text << (flags.json ? "\n" : "");
  return kExitOk;
}

}  // namespace

Subcommand AddInspectCommand(CLI::App& app) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* inspect = app.add_subcommand("inspect", "Describe a dataset");
  inspect->add_option("dataset", flags->dataset, "Dataset directory")->required();
  inspect->add_flag("--json", flags->json, "Print one JSON object on stdout");
  inspect->footer(
      HelpFooter({"0   described", "1   DATASET is not a readable dataset", "2   usage"},
                 "dir, format, tool, samples, shape, dtype, layout, sample_bytes, classes, "
                 "compression, shuffle_seed, bytes, preprocessing, source, files") +
      "On failure: ok (false), error, exit_code.\n");
  return {inspect, [flags] { return RunInspect(*flags); }};
}

}  // namespace kiln
