// kiln verify: structure, checksums and counts of a dataset; exit 1 when it has problems.
#include <iostream>
#include <memory>
#include <string>

#include "formats/verifier.h"
#include "reader/jpeg_sample_decoder.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_progress.h"

namespace kiln {
namespace {

struct VerifyFlags {
  std::string dataset;
  bool deep = false;
  bool json = false;
};

int RunVerify(const VerifyFlags& flags) {
  VerifyOptions vo;
  vo.deep = flags.deep;
  // JPEG records are decoded whole by the reader's decoder (formats/ has none).
  vo.image_decoder = std::make_shared<JpegSampleDecoder>(/*channels=*/0);
  const VerifyReport report = [&] {
    ProgressPrinter printer("kiln verify", "records");
    vo.progress = [&](uint64_t done, uint64_t total) { printer.Update(done, total); };
    return VerifyDataset(flags.dataset, vo);
  }();
  std::cout << (flags.json ? VerifyReportToJson(report) + "\n" : VerifyReportToText(report));
  return report.ok() ? kExitOk : kExitDataProblem;
}

}  // namespace

Subcommand AddVerifyCommand(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* verify = app.add_subcommand("verify", "Check a dataset: structure, checksums, counts");
  verify->add_option("dataset", flags->dataset, "Dataset directory")->required();
  verify->add_flag("--deep", flags->deep,
                   "Also decompress every zstd record, decode every JPEG record, and check that "
                   "each record holds exactly one sample's bytes");
  verify->add_flag("--json", flags->json, "Print one JSON object on stdout");
  verify->footer(
      HelpFooter({"0   the dataset is sound",
                  "1   it has problems (each named: file, record, byte offset), "
                  "or DATASET is not a readable dataset",
                  "2   usage"},
                 "ok, dir, deep, samples, files_checked, records_checked, bytes_checked, seconds, "
                 "problems"));
  return {verify, [flags] { return RunVerify(*flags); }};
}

}  // namespace kiln
