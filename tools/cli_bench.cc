// kiln bench: how fast the reader streams a dataset, one run or a sweep over threads/prefetch.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "tools/bench_runner.h"
#include "reader/world.h"
#include "tools/cli_commands.h"

namespace kiln {
namespace {

struct BenchFlags {
  std::string dataset;
  BenchOptions options;
  bool no_shuffle = false;
  uint32_t threads = 0;
  bool json = false;
  bool sweep = false;
};

void DeclareBenchFlags(CLI::App* bench, BenchFlags* f) {
  bench->add_option("dataset", f->dataset, "Dataset directory")->required();
  bench->add_option("--batch-size", f->options.loader.batch_size, "Samples per batch (256)");
  bench->add_option("--threads", f->threads, "Fetch threads (default: all cores)")
      ->check(CLI::Range(0u, 256u));
  bench->add_option("--prefetch", f->options.loader.prefetch, "Batches in flight (2)");
  bench->add_option("--epochs", f->options.epochs, "Epochs to time (3)")
      ->check(CLI::Range(1u, 1000000u));
  bench->add_option("--seed", f->options.loader.seed, "Shuffle seed (0)");
  bench->add_flag("--no-shuffle", f->no_shuffle, "Read in dataset order");
  bench->add_flag("--shuffle", "Shuffle (the default)");
  bench->add_flag("--json", f->json, "Print one JSON object on stdout");
  bench->add_flag("--sweep", f->sweep,
                  "Run over thread counts 1, 2, 4, ... (up to 2x cores) and prefetch 1, 2, 4, 8; "
                  "print a table and the recommended setting");
  bench->add_flag("--cold", f->options.cold,
                  "Drop the dataset files' pages from the page cache before each run");
  bench->add_option("--consumer-ms", f->options.consumer_ms,
                    "Simulated training step: sleep this many ms per batch (0)")
      ->check(CLI::Range(0.0, 60000.0));
}

int RunSweepCommand(const BenchFlags& flags, const BenchOptions& options) {
  Result<SweepReport> sweep =
      RunSweep(flags.dataset, options, std::max(1u, std::thread::hardware_concurrency()));
  if (!sweep.ok()) return FailCommand(sweep.status(), flags.json);
  if (flags.json) {
    std::cout << SweepReportJson(*sweep) << "\n";
  } else {
    std::cout << BenchReportText(sweep->runs[sweep->recommended]) << SweepReportText(*sweep);
  }
  bool all_once = true;
  for (const BenchReport& r : sweep->runs) all_once &= r.every_sample_once;
  return all_once ? kExitOk : kExitDataProblem;
}

int RunBenchCommand(const BenchFlags& flags) {
  BenchOptions options = flags.options;
  options.loader.shuffle = flags.no_shuffle ? ShuffleMode::kNone : ShuffleMode::kExact;
  options.loader.num_threads = flags.threads;
  // Under mpirun or srun each copy measures its own rank's share (reader/world.h).
  Result<World> world = WorldFromEnvironment();
  if (!world.ok()) return FailCommand(world.status(), flags.json);
  options.loader.rank = world->rank;
  options.loader.world_size = world->world_size;
  if (world->world_size > 1) {
    std::fprintf(stderr, "kiln bench: rank %u of %u (from %s)\n", world->rank, world->world_size,
                 world->source.c_str());
  }
  if (flags.sweep) return RunSweepCommand(flags, options);
  Result<BenchReport> report = RunBench(flags.dataset, options);
  if (!report.ok()) return FailCommand(report.status(), flags.json);
  std::cout << (flags.json ? BenchReportJson(*report) + "\n" : BenchReportText(*report));
  return report->every_sample_once ? kExitOk : kExitDataProblem;
}

}  // namespace

Subcommand AddBenchCommand(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand("bench", "Measure how fast the reader streams a dataset");
  DeclareBenchFlags(bench, flags.get());
  return {bench, [flags] { return RunBenchCommand(*flags); }};
}

}  // namespace kiln
