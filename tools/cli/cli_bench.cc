// kiln bench: how fast the reader streams a dataset (or a mixture of datasets: several
// DATASETs with --weights or --repeats), one run or a sweep over threads/prefetch.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "reader/world.h"
#include "tools/bench/bench_runner.h"
#include "tools/cli/cli_commands.h"
#include "tools/cli/cli_parsing.h"

namespace kiln {
namespace {

struct BenchFlags {
  std::vector<std::string> datasets;
  BenchOptions options;
  std::vector<double> weights, repeats;
  uint64_t samples_per_epoch = 0;
  CLI::Option* weights_option = nullptr;
  CLI::Option* repeats_option = nullptr;
  CLI::Option* samples_per_epoch_option = nullptr;
  bool no_shuffle = false;
  std::string shuffle = "exact";
  uint64_t read_ahead_mib = LoaderOptions{}.read_ahead_bytes >> 20;
  uint64_t block_kib = LoaderOptions{}.block_bytes >> 10;
  uint32_t threads = 0;
  std::string io = "auto";
  std::string resized_crop, center_crop;  // HxW ("" = off)
  bool json = false;
  bool sweep = false;
  CLI::Option* block_kib_option = nullptr;
  CLI::Option* window_option = nullptr;
};

void DeclareBenchFlags(CLI::App* bench, BenchFlags* f) {
  bench
      ->add_option("dataset", f->datasets,
                   "Dataset directory; several for a mixture (each epoch draws from every one, "
                   "by --weights or --repeats; default --repeats 1 each)")
      ->required();
  f->weights_option = bench
                          ->add_option("--weights", f->weights,
                                       "Mixture: the share of each epoch drawn from each "
                                       "DATASET, comma-separated, each > 0 (0.7,0.3)")
                          ->delimiter(',');
  f->repeats_option = bench
                          ->add_option("--repeats", f->repeats,
                                       "Mixture: samples drawn per epoch from each DATASET as a "
                                       "multiple of its size, comma-separated, each > 0 (1,3)")
                          ->delimiter(',')
                          ->excludes(f->weights_option);
  f->samples_per_epoch_option =
      bench
          ->add_option("--samples-per-epoch", f->samples_per_epoch,
                       "Mixture: samples of an epoch, all ranks together (default: the "
                       "datasets' total with --weights, the sum of repeat x samples with "
                       "--repeats)")
          ->check(CLI::Range(uint64_t{1}, ~uint64_t{0}));
  bench->add_option("--batch-size", f->options.loader.batch_size, "Samples per batch (256)");
  bench->add_option("--threads", f->threads, "Fetch threads (default: all cores)")
      ->check(CLI::Range(0u, 256u));
  bench->add_option("--prefetch", f->options.loader.prefetch, "Batches in flight (2)");
  bench->add_option("--epochs", f->options.epochs, "Epochs to time (3)")
      ->check(CLI::Range(1u, 1000000u));
  bench->add_option("--seed", f->options.loader.seed, "Shuffle seed, >= 0 (0)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* no_shuffle =
      bench->add_flag("--no-shuffle", f->no_shuffle, "Read in dataset order (= --shuffle none)");
  bench
      ->add_option("--shuffle", f->shuffle,
                   "Read order: exact (one global permutation, the default), block (shuffled "
                   "blocks of consecutive samples, for data larger than memory) or none")
      ->expected(0, 1)
      ->default_str("exact")
      ->check(CLI::IsMember({"exact", "block", "none"}))
      ->excludes(no_shuffle);
  f->block_kib_option = bench
                            ->add_option("--block-kib", f->block_kib,
                                         "Block order: KiB of consecutive samples per block (4096)")
                            ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  f->window_option = bench
                         ->add_option("--window", f->options.loader.shuffle_window,
                                      "Block order: blocks per shuffle window (16)")
                         ->check(CLI::Range(1u, 1u << 20));
  bench
      ->add_option("--read-ahead-mib", f->read_ahead_mib,
                   "MiB of upcoming samples the fetch threads ask the kernel to read ahead while "
                   "reads miss the page cache; 0 off (16)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{4096}));
  bench
      ->add_option("--io", f->io,
                   "How records are read: direct (O_DIRECT io_uring reads, no page cache: data "
                   "larger than memory), mmap (the file mappings and the page cache) or auto "
                   "(direct when the dataset exceeds half the memory limit; the default)")
      ->check(CLI::IsMember({"auto", "mmap", "direct"}));
  bench
      ->add_option("--disk-mbps", f->options.disk_mb_per_s,
                   "The storage's own read rate in MB/s (fio on the same files): reports the "
                   "rate as a share of it")
      ->check(CLI::Range(0.0, 1e7));
  bench->add_option("--random-resized-crop", f->resized_crop,
                    "RandomResizedCrop to HxW (scale 0.08-1, ratio 3/4-4/3) while reading");
  bench->add_option("--center-crop", f->center_crop,
                    "Center crop (ratio 224/256) resized to HxW while reading");
  bench->add_flag("--flip", f->options.loader.augment.flip,
                  "Mirror left-right with probability 1/2 while reading");
  bench->add_flag("--json", f->json, "Print one JSON object on stdout");
  bench->add_flag("--sweep", f->sweep,
                  "Run over thread counts 1, 2, 4, ... (up to 2x cores) and prefetch 1, 2, 4, 8; "
                  "print a table and the recommended setting");
  bench->add_flag("--cold", f->options.cold,
                  "Drop the dataset files' pages from the page cache before each run");
  bench
      ->add_option("--device", f->options.loader.device,
                   "CUDA device to upload every batch to: also measures the pinned upload rate, "
                   "the share of copy time hidden behind --consumer-ms, and the fused normalise "
                   "kernel; fails (exit 1, no figures) without a usable GPU. -1 host only (-1)")
      ->check(CLI::Range(-1, 1023));
  bench
      ->add_option("--consumer-ms", f->options.consumer_ms,
                   "Simulated training step: sleep this many ms per batch (0)")
      ->check(CLI::Range(0.0, 60000.0));
}

int RunSweepCommand(const BenchFlags& flags, const BenchOptions& options) {
  Result<SweepReport> sweep =
      RunSweep(flags.datasets, options, std::max(1u, std::thread::hardware_concurrency()));
  if (!sweep.ok()) return FailCommand(sweep.status(), flags.json);
  if (flags.json) {
    std::cout << SweepReportJson(*sweep) << "\n";
  } else {
    std::cout << BenchReportText(sweep->runs[sweep->shown]) << SweepReportText(*sweep);
  }
  bool all_once = true;
  for (const BenchReport& r : sweep->runs) all_once &= r.every_sample_once;
  return all_once ? kExitOk : kExitDataProblem;
}

int RunBenchCommand(const BenchFlags& flags) {
  BenchOptions options = flags.options;
  options.loader.shuffle = flags.no_shuffle || flags.shuffle == "none" ? ShuffleMode::kNone
                           : flags.shuffle == "block"                  ? ShuffleMode::kBlock
                                                                       : ShuffleMode::kExact;
  if (options.loader.shuffle != ShuffleMode::kBlock &&
      (flags.block_kib_option->count() > 0 || flags.window_option->count() > 0)) {
    return FailCommand(Status::InvalidArgument(
                           std::string("--block-kib and --window apply to block order only; add "
                                       "--shuffle block (the order is ") +
                           ShuffleModeName(options.loader.shuffle) + ")"),
                       flags.json);
  }
  options.loader.read_ahead_bytes = flags.read_ahead_mib << 20;
  options.loader.block_bytes = flags.block_kib << 10;
  options.loader.num_threads = flags.threads;
  options.loader.io = *ParseIoMode(flags.io);  // checked by CLI11
  // Output sizes: what a dataset of JPEG records needs (formats/shards/shard_format.md section 12).
  AugmentOptions& augment = options.loader.augment;
  if (!flags.resized_crop.empty()) {
    Status s = ParseImageSize(flags.resized_crop, &augment.resize_height, &augment.resize_width);
    if (!s.ok()) return FailCommand(s.WithContext("--random-resized-crop"), flags.json);
  }
  if (!flags.center_crop.empty()) {
    Status s =
        ParseImageSize(flags.center_crop, &augment.center_crop_height, &augment.center_crop_width);
    if (!s.ok()) return FailCommand(s.WithContext("--center-crop"), flags.json);
  }
  const bool mixture_flags = flags.weights_option->count() > 0 ||
                             flags.repeats_option->count() > 0 ||
                             flags.samples_per_epoch_option->count() > 0;
  if (flags.datasets.size() > 1 || mixture_flags) {
    // Counts and ranges are Loader::CreateMixture's (the message names the datasets).
    MixtureOptions mixture;
    mixture.weights = flags.weights;
    mixture.repeats = flags.repeats;
    if (mixture.weights.empty() && mixture.repeats.empty()) {
      mixture.repeats.assign(flags.datasets.size(), 1.0);  // each dataset once per epoch
    }
    mixture.samples_per_epoch = flags.samples_per_epoch;
    options.mixture = mixture;
  }
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
  Result<BenchReport> report = RunBench(flags.datasets, options);
  if (!report.ok()) return FailCommand(report.status(), flags.json);
  std::cout << (flags.json ? BenchReportJson(*report) + "\n" : BenchReportText(*report));
  return report->every_sample_once ? kExitOk : kExitDataProblem;
}

}  // namespace

Subcommand AddBenchCommand(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure how fast the reader streams a dataset, or a mixture of datasets");
  DeclareBenchFlags(bench, flags.get());
  bench->footer(
      HelpFooter({"0   every sample was read exactly once in each epoch (a mixture: each "
                  "dataset's quota, each pass over it once)",
                  "1   a sample was missed or repeated, or DATASET cannot be read", "2   usage"},
                 "dir, samples, bytes, batches, epochs, seconds, samples_per_s, mb_per_s, "
                 "threads, prefetch, batch_size, every_sample_once, shuffle, cache, "
                 "bottleneck, verdict") +
      "  (and the time of each stage, *_seconds); with --sweep also recommended, sweep (the "
      "runs); a mixture also mixture {samples_per_epoch, sources [{dir, weight or repeat, "
      "num_samples, quota, samples_read}]}.\nOn failure: ok (false), error, exit_code.\n"
      "Stages (seconds, fetch threads summed): fetch_seconds = decompress_seconds + "
      "augment_seconds + copy_seconds, wall time, each part with the page faults and preemption "
      "inside it (copy: index lookup, checksum, copy into the slot); storage_wait_seconds = "
      "fetch_seconds - fetch_cpu_seconds, the share of the same time off the CPU, not one more "
      "part.\n");
  return {bench, [flags] { return RunBenchCommand(*flags); }};
}

}  // namespace kiln
