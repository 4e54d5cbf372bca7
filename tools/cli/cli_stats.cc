// kiln stats: reads the loader's stats export of N ranks (kiln-stats-rank*.jsonl) and prints, per
// interval, the slowest rank, each rank's wait share and the stage that limits it, with the
// verdicts of `kiln bench` (tools/bench/stats_report.h); --png draws the wait share per rank.
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tools/bench/stats_report.h"
#include "tools/cli/cli_commands.h"
#include "tools/imaging/imaging_plugin.h"

namespace kiln {
namespace {

struct StatsFlags {
  std::vector<std::string> paths;
  bool json = false;
  std::string png;
};

// The wait share of each rank per bucket, from the report's first bucket to its last (buckets
// without data are NaN, so a gap in the run is a gap in the picture).
WaitPlot MakeWaitPlot(const StatsReport& report) {
  WaitPlot plot;
  plot.bucket_seconds = report.interval_ns / 1e9;
  const uint64_t first = report.intervals.front().bucket;
  const size_t n = report.intervals.back().bucket - first + 1;
  std::vector<size_t> row_of_rank;  // rank -> row, by the summary's order
  for (size_t i = 0; i < report.ranks.size(); ++i) {
    const uint32_t rank = report.ranks[i].total.rank;
    plot.series.push_back("rank " + std::to_string(rank));
    if (row_of_rank.size() <= rank) row_of_rank.resize(rank + 1, 0);
    row_of_rank[rank] = i;
  }
  plot.share.assign(report.ranks.size(),
                    std::vector<double>(n, std::numeric_limits<double>::quiet_NaN()));
  for (const StatsInterval& iv : report.intervals) {
    for (const RankInterval& r : iv.ranks) {
      plot.share[row_of_rank[r.rank]][iv.bucket - first] = r.wait_share;
    }
  }
  plot.title = "kiln stats: " + std::to_string(report.ranks.size()) + " ranks, worst rank " +
               std::to_string(report.ranks[report.worst].total.rank) + " (" +
               report.ranks[report.worst].total.bottleneck.name + ")";
  return plot;
}

int RunStats(const StatsFlags& flags) {
  Result<std::vector<std::string>> files = ExpandStatsPaths(flags.paths);
  if (!files.ok()) return FailCommand(files.status(), flags.json);
  Result<StatsReport> report = ReadStatsReport(*files);
  if (!report.ok()) return FailCommand(report.status(), flags.json);
  if (!flags.png.empty()) {
    // The drawing lives in the image plugin (tools/imaging/imaging_plugin.h), loaded only now.
    Result<const ImagingPlugin*> plugin = LoadImagingPlugin();
    if (!plugin.ok()) return FailCommand(plugin.status(), flags.json);
    Status s = (*plugin)->render_wait_plot(MakeWaitPlot(*report), flags.png);
    if (!s.ok()) return FailCommand(s, flags.json);
  }
  if (flags.json) {
    std::cout << StatsReportJson(*report) << "\n";
  } else {
    for (const std::string& w : report->warnings) std::cerr << "kiln stats: warning: " << w << "\n";
    std::cout << StatsReportText(*report);
    if (!flags.png.empty()) std::cout << "wrote the wait share per rank to " << flags.png << "\n";
  }
  return kExitOk;
}

}  // namespace

Subcommand AddStatsCommand(CLI::App& app) {
  auto flags = std::make_shared<StatsFlags>();
  CLI::App* stats = app.add_subcommand(
      "stats",
      "Read the loader's stats export of N ranks (KILN_STATS_DIR): per interval the slowest "
      "rank, each rank's wait share and the stage that limits it");
  stats
      ->add_option("files", flags->paths,
                   "kiln-stats-rank*.jsonl files, or directories holding them")
      ->required();
  stats->add_flag("--json", flags->json, "Print one JSON object on stdout");
  stats->add_option("--png", flags->png,
                    "Also draw the wait share per rank over time to this picture (lines for up "
                    "to 12 ranks, else a heatmap)");
  stats->footer(
      HelpFooter({"0   reported",
                  "1   a file is not a kiln stats export, is damaged (the "
                  "message names the file and line), or cannot be read or "
                  "written",
                  "2   usage"},
                 "ok, schema, version, files, world_size, interval_s, start_unix_ns, runs, "
                 "intervals, summary, warnings") +
      "  intervals: bucket, start_s, end_s, slowest_rank, ranks (rank, host, seconds, samples, "
      "samples_per_s, wait_share, bottleneck, verdict, stages); summary: worst_rank, ranks (the "
      "same over each rank's whole export, with intervals, slowest_in, runs).\nOn failure: ok "
      "(false), error, exit_code.\nwait_share = consumer wait / wall time: the share of time the "
      "training loop waited for data. The verdicts are kiln bench's.\n");
  return {stats, [flags] { return RunStats(*flags); }};
}

}  // namespace kiln
