// kiln verify: structure, checksums and counts of a dataset; exit 1 when it has problems.
#include <iostream>
#include <memory>
#include <string>

#include "formats/verifier.h"
#include "tools/cli_commands.h"

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
  const VerifyReport report = VerifyDataset(flags.dataset, vo);
  std::cout << (flags.json ? VerifyReportToJson(report) + "\n" : VerifyReportToText(report));
  return report.ok() ? kExitOk : kExitDataProblem;
}

}  // namespace

Subcommand AddVerifyCommand(CLI::App& app) {
  auto flags = std::make_shared<VerifyFlags>();
  CLI::App* verify = app.add_subcommand("verify", "Check a dataset: structure, checksums, counts");
  verify->add_option("dataset", flags->dataset, "Dataset directory")->required();
  verify->add_flag("--deep", flags->deep, "Also decompress every record and check its size");
  verify->add_flag("--json", flags->json, "Print one JSON object on stdout");
  return {verify, [flags] { return RunVerify(*flags); }};
}

}  // namespace kiln
