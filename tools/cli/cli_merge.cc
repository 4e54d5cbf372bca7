// kiln merge: joins the parts of a partitioned pack into one dataset (tools/pack/part_merger.h).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_progress.h"
#include "tools/pack/part_merger.h"

namespace kiln {
namespace {

struct MergeFlags {
  std::vector<std::string> args;  // PARTS... OUTPUT, or PARTS... with -o OUTPUT
  std::string output;             // -o/--output
  bool resume = false, reshard = false, overwrite = false, json = false;
};

int RunMerge(const MergeFlags& flags) {
  const bool output_flag = !flags.output.empty();
  if (flags.args.size() < (output_flag ? 1u : 2u)) {
    return FailCommand(Status::InvalidArgument(
                           "kiln merge needs the parts (OUT.parts, or part directories) and the "
                           "output dataset: kiln merge OUT.parts OUT (or -o OUT)"),
                       flags.json);
  }
  MergeOptions options;
  options.inputs.assign(flags.args.begin(), flags.args.end() - (output_flag ? 0 : 1));
  options.output = output_flag ? flags.output : flags.args.back();
  options.resume = flags.resume;
  options.reshard = flags.reshard;
  options.overwrite = flags.overwrite;
  Result<MergeReport> report = [&] {
    ProgressPrinter printer("kiln merge", "samples");
    options.progress = [&](uint64_t done, uint64_t total) { printer.Update(done, total); };
    return MergeParts(options);
  }();
  if (!report.ok()) return FailCommand(report.status(), flags.json);
  if (flags.json) {
    std::cout << MergeReportJson(*report) << "\n";
  } else {
    std::printf(
        "merged %u parts into %s%s: %llu samples (%llu rejected), %llu files, %.1f MB, "
        "%s, in %.2f s (%.1f MB/s read)\n",
        report->parts, report->output.c_str(), report->resumed ? " (resumed)" : "",
        static_cast<unsigned long long>(report->samples),
        static_cast<unsigned long long>(report->rejected),
        static_cast<unsigned long long>(report->files), report->bytes / 1e6,
        report->copied ? "records copied" : "shards moved", report->seconds,
        report->seconds > 0 ? report->bytes_read / 1e6 / report->seconds : 0.0);
  }
  return kExitOk;
}

}  // namespace

Subcommand AddMergeCommand(CLI::App& app) {
  auto flags = std::make_shared<MergeFlags>();
  CLI::App* merge =
      app.add_subcommand("merge", "Join the parts of `kiln pack --part I --of N` into one dataset");
  merge
      ->add_option("parts_and_output", flags->args,
                   "OUT.parts (or the part directories), then the dataset directory to create "
                   "unless -o names it")
      ->required()
      ->expected(1, -1);
  merge->add_option("-o,--output", flags->output, "The dataset directory to create");
  merge->add_flag("--resume", flags->resume, "Finish a merge that was interrupted");
  merge->add_flag("--overwrite", flags->overwrite, "Replace an existing dataset at OUTPUT");
  merge->add_flag("--reshard", flags->reshard,
                  "Copy the records into freshly cut shards (a plain pack's bytes) instead of "
                  "moving the parts' shards; keeps the parts");
  merge->add_flag("--json", flags->json, "Print one JSON object on stdout");
  merge->footer(
      HelpFooter({"0   merged",
                  "1   a part is missing, damaged, incomplete or disagrees with the others, or "
                  "an I/O error",
                  "2   usage"},
                 "output, parts, samples, rejected, files, bytes, bytes_read, mode, resumed, "
                 "seconds, mb_per_s") +
      "On failure: ok (false), error, exit_code.\n");
  return {merge, [flags] { return RunMerge(*flags); }};
}

}  // namespace kiln
