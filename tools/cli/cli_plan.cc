// kiln plan: lists the input once and writes the plan of a partitioned pack
// (tools/pack/pack_plan.h), for `kiln pack --plan PLAN.json --part I OUT` on every node.
#include <sys/stat.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_pack_flags.h"
#include "tools/imaging/imaging_plugin.h"
#include "tools/pack/pack_plan.h"

namespace kiln {
namespace {

// Ranges printed one a line up to this many parts; beyond, the first and last few (--json
// lists all).
constexpr uint32_t kPartsShownInFull = 16;

Status CheckPlanPath(const PackFlags& f) {
  struct stat st;
  if (f.output.empty()) return Status::InvalidArgument("kiln plan needs INPUT and PLAN.json");
  if (::stat(f.output.c_str(), &st) != 0) return Status::Ok();
  if (S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("plan " + f.output + " is a directory; name the plan file");
  }
  if (!f.overwrite) {
    return Status::InvalidArgument("plan " + f.output +
                                   " exists (pass --overwrite to replace it; parts already packed "
                                   "from it no longer merge with parts of the new one if the "
                                   "listing changed)");
  }
  return Status::Ok();
}

std::string RangeLine(const PackPlan& plan, uint32_t i) {
  const ItemRange r = plan.Range(i);
  return "  part " + std::to_string(i) + ": items [" + std::to_string(r.begin) + ", " +
         std::to_string(r.end) + ") (" + std::to_string(r.size()) + " images)\n";
}

void PrintPlan(const PackPlan& plan, const std::string& path) {
  std::printf(
      "planned %zu images (%zu listing problems, %zu files skipped for their name) of %s "
      "in %u parts into %s (listing %s, options %s):\n",
      plan.items.size(), plan.problems.size(), plan.skipped.size(), plan.input.c_str(), plan.parts,
      path.c_str(), HexDigest(plan.listing_xxh3_64).c_str(),
      HexDigest(plan.options_xxh3_64).c_str());
  for (uint32_t i = 0; i < plan.parts; ++i) {
    const bool shown = plan.parts <= kPartsShownInFull || i < 4 || i + 4 >= plan.parts;
    if (shown) std::fputs(RangeLine(plan, i).c_str(), stdout);
    if (!shown && i == 4) std::printf("  ... (kiln plan --json lists every range)\n");
  }
}

std::string PlanJson(const PackPlan& plan, const std::string& path) {
  nlohmann::ordered_json j;
  j["ok"] = true;
  j["plan"] = path;
  j["input"] = PrintableName(plan.input);
  j["listed_items"] = plan.items.size();
  j["listing_problems"] = plan.problems.size();
  j["skipped"] = plan.skipped.size();
  j["parts"] = plan.parts;
  j["ranges"] = nlohmann::ordered_json::array();
  for (uint32_t i = 0; i < plan.parts; ++i)
    j["ranges"].push_back({plan.Range(i).begin, plan.Range(i).end});
  j["listing_xxh3_64"] = HexDigest(plan.listing_xxh3_64);
  j["options_xxh3_64"] = HexDigest(plan.options_xxh3_64);
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void PrintDiagnostics(const PackPlan& plan) {
  for (const std::string& w : plan.warnings)
    std::fprintf(stderr, "kiln plan: warning: %s\n", w.c_str());
  for (const Rejection& r : plan.problems) {
    // A list file's reasons start with "line N: ".
    std::fprintf(stderr, "kiln plan: listing problem %s: %s (part 0 rejects it)\n",
                 PrintableName(r.path).c_str(), r.reason.c_str());
  }
}

int RunPlan(const PackFlags& flags) {
  Status usable = CheckPlanPath(flags);
  if (!usable.ok()) return FailCommand(usable, flags.json);
  Result<PackOptions> options = PackOptionsFromFlags(flags);
  if (!options.ok()) return FailCommand(options.status(), flags.json);
  // The listing and the shuffle live in the packer, in the image plugin
  // (tools/imaging/imaging_plugin.h).
  Result<const ImagingPlugin*> plugin = LoadImagingPlugin();
  if (!plugin.ok()) return FailCommand(plugin.status(), flags.json);
  Result<PackPlan> plan = (*plugin)->plan_pack(*options, flags.of);
  if (!plan.ok()) return FailCommand(plan.status(), flags.json);
  Status written = WritePackPlan(flags.output, *plan);
  if (!written.ok()) return FailCommand(written, flags.json);
  PrintDiagnostics(*plan);
  if (flags.json) {
    std::cout << PlanJson(*plan, flags.output) << "\n";
  } else {
    PrintPlan(*plan, flags.output);
  }
  return kExitOk;
}

}  // namespace

Subcommand AddPlanCommand(CLI::App& app) {
  auto flags = std::make_shared<PackFlags>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "List an image folder or list file once and write the plan of a partitioned pack, for "
      "`kiln pack --plan PLAN.json --part I OUT` on every node");
  plan->add_option("input", flags->input,
                   "ImageFolder directory (one sub-folder per class) or list file")
      ->required();
  plan->add_option("plan,-o,--output", flags->output, "The plan file to write (PLAN.json or -o)")
      ->required();
  plan->add_option("--of", flags->of, "Number of parts N")
      ->required()
      ->check(CLI::Range(1u, kMaxParts));
  DeclareRecordFlags(plan, flags.get());
  plan->add_flag("--overwrite", flags->overwrite, "Replace an existing plan file");
  plan->add_flag("--json", flags->json, "Print one JSON object on stdout");
  plan->footer(HelpFooter({"0   planned (listing problems are in the plan: part 0 rejects them)",
                           "1   the input is missing or unreadable, a listing problem under "
                           "--on-error fail, an I/O error",
                           "2   usage: bad flags, no image found, PLAN.json exists (without "
                           "--overwrite), tar or TFRecord input"},
                          "ok, plan, input, listed_items, listing_problems, skipped, parts, "
                          "ranges, listing_xxh3_64, options_xxh3_64") +
               "On failure: ok (false), error, exit_code.\nThe plan's format: "
               "tools/pack/plan_format.md.\n");
  return {plan, [flags] { return RunPlan(*flags); }};
}

}  // namespace kiln
