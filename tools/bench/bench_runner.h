// kiln::RunBench: drives a Loader over a dataset (or a mixture of datasets, reader/mixture.md)
// for `kiln bench` and measures throughput.
//
// The consumer touches nothing but the batch handles (and, with consumer_ms, sleeps per batch
// like a training step), so the figures are the loader's own rate. Stage times come from
// LoaderStats; Diagnose() names the bottleneck (tools/bench/bottleneck.h). The first epoch also
// proves that every sample of this rank was delivered exactly once; for a mixture, that each
// source delivered its quota and each pass over a source read each of its samples once.
// Thread safety: reentrant.
#ifndef KILN_TOOLS_BENCH_BENCH_RUNNER_H_
#define KILN_TOOLS_BENCH_BENCH_RUNNER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "reader/loader.h"

namespace kiln {

struct BenchOptions {
  LoaderOptions loader;
  uint32_t epochs = 3;     // epochs timed after opening. Default 3.
  double consumer_ms = 0;  // simulated training step: the consumer sleeps this long per batch
  bool cold = false;       // drop the dataset files' pages from the page cache before opening
  // The storage's own sequential or random read rate for this dataset's files, in 10^6 bytes
  // per second (fio on the same files, see bench/larger_than_memory.sh); 0 when unknown.
  // A storage-bound report states its rate as a share of it. Default 0.
  double disk_mb_per_s = 0;
  // A mixture (`kiln bench A B --weights 0.7,0.3`): RunBench's datasets are its sources, read
  // by Loader::OpenMixture with these weights or repeats and samples per epoch (its errors:
  // counts that differ from the datasets', values not > 0, schemas that differ, block order).
  // Unset: RunBench reads one dataset. Default unset.
  std::optional<MixtureOptions> mixture;
};

// One source of a mixture run, in the order given.
struct BenchSource {
  std::string dir;
  double weight = 0;          // as given (0 with repeats)
  double repeat = 0;          // as given (0 with weights)
  uint64_t num_samples = 0;   // n_s
  uint64_t quota = 0;         // c_s: samples drawn per epoch, all ranks together
  uint64_t samples_read = 0;  // samples of it this rank was served over all epochs (no padding)
};

struct BenchReport {
  std::string dir;
  uint64_t samples = 0;  // samples delivered over all epochs
  uint64_t bytes = 0;    // sample bytes delivered
  uint64_t batches = 0;
  uint32_t epochs = 0;
  uint32_t threads = 0;
  uint32_t prefetch = 0;
  uint32_t batch_size = 0;
  bool pinned = false;
  double open_seconds = 0;         // Dataset::Open + Loader::Create
  double first_batch_seconds = 0;  // from Create's start to the first batch
  double seconds = 0;              // all epochs, from the first Next() to the end
  double samples_per_s = 0;
  double mb_per_s = 0;                // 10^6 bytes per second
  double consumer_wait_fraction = 0;  // share of `seconds` the consumer waited for batches
  bool every_sample_once = false;     // epoch 0 delivered each of this rank's samples exactly once
  uint64_t checksum = 0;              // XOR-folded hash of all labels and sample indices delivered

  std::string shuffle = "exact";  // read order: exact, block or none
  uint64_t block_bytes = 0;       // block order: the option (LoaderOptions::block_bytes)
  uint32_t shuffle_window = 0;    // block order: blocks per window
  double disk_mb_per_s = 0;       // BenchOptions::disk_mb_per_s
  // Page cache: resident_fraction is the share of the dataset's file bytes in the page cache
  // at open; `cache` is "cold" when the pages were dropped first (--cold) or under 5% were
  // resident, "warm" from 95%, else "partly warm".
  std::string cache = "warm";
  double resident_fraction = 0;
  // Stages, in seconds. Fetch-thread stages are summed over threads (divide by threads x
  // seconds for a busy share); consumer stages are on the consumer thread.
  double slot_wait_seconds = 0;  // fetch threads waiting for a free batch slot (or, at an
                                 // epoch's end, for work)
  // fetch_seconds = decompress_seconds + augment_seconds + copy_seconds exactly: three wall-time
  // parts, each including the page faults and preemption that happened inside it. Independently
  // of the parts, fetch_seconds = fetch_cpu_seconds + storage_wait_seconds (thread CPU time and
  // the rest); so decompress_seconds may exceed fetch_cpu_seconds when zstd's input faulted.
  double fetch_seconds = 0;             // fetch threads reading samples (wall time)
  double decompress_seconds = 0;        //   in zstd (wall, timed per zstd record)
  double augment_seconds = 0;           //   in crop/flip (wall, estimated from every 8th sample)
  double copy_seconds = 0;              //   the rest: index lookup, checksum, copy into the slot
  double fetch_cpu_seconds = 0;         // of fetch_seconds, on the CPU (thread CPU clock)
  double storage_wait_seconds = 0;      // of fetch_seconds, off the CPU (page faults waiting for
                                        // storage, preemption): fetch - fetch_cpu, at least 0
  double upload_seconds = 0;            // host time waiting for uploads (--device): exposed copy
  double consumer_wait_seconds = 0;     // consumer waiting for a batch
  double first_batch_wait_seconds = 0;  // of which for the first batch
  double consumer_seconds = 0;          // consumer's simulated work (--consumer-ms)
  uint64_t zstd_records = 0;            // records decompressed
  bool jpeg_records = false;            // the dataset holds JPEG records (decoded in "copy")
  // Read-ahead (LoaderOptions::read_ahead_bytes; LoaderStats has the definitions):
  uint64_t read_ahead_window_bytes = 0;  // the option
  uint64_t read_ahead_samples = 0;       // samples advised
  double read_ahead_mb = 0;              // their stored bytes, 10^6 bytes
  double read_ahead_seconds = 0;         // fetch threads issuing advice and probes
  uint64_t residency_probes = 0;
  uint64_t residency_misses = 0;
  // The io path (Loader::io_path, io_reason) and its direct reads (LoaderStats):
  std::string io = "mmap";  // "mmap" or "direct"
  std::string io_reason;    // why that path
  // Block order on the mmap path whose window, read-ahead and slots exceed the memory limit
  // (Loader::block_memory_fit, BlockMemoryFitWarning in reader/loader.h): the warning; empty
  // when it fits, in other orders and on the direct path. The storage verdict then advises a
  // smaller window or --io direct, never larger blocks.
  std::string memory_fit_warning;
  uint32_t direct_depth = 0;          // reads in flight per thread
  uint64_t direct_reads = 0;          // reads completed
  double direct_read_mb = 0;          // bytes they read, 10^6 bytes
  uint64_t direct_max_in_flight = 0;  // the most one thread had in flight
  // io remote: range GETs (attempts), retries, failed reads, body bytes (10^6) and per-attempt
  // latency quantiles in milliseconds (LoaderStats::requests).
  uint64_t remote_requests = 0, remote_retries = 0, remote_failures = 0;
  uint64_t remote_hedges = 0, remote_hedge_wins = 0;
  double remote_mb = 0, remote_p50_ms = 0, remote_p99_ms = 0;
  // Reads served from the local cache (KILN_REMOTE_CACHE_DIR) instead of a request, and MB.
  uint64_t remote_cache_reads = 0;
  double remote_cache_mb = 0;
  double cpu_seconds = 0;     // process user + system CPU time during the timed epochs
  uint64_t major_faults = 0;  // page faults that read storage, during open + epochs
  double peak_rss_mb = 0;     // process peak resident set (getrusage), 10^6 bytes
  double rss_anon_mb = 0;     // anonymous resident memory at the end, loader open
  double rss_file_mb = 0;     // file-backed resident memory (mapped dataset pages)
  double consumer_ms = 0;
  // --device N (LoaderOptions::device): the upload and the fused kernel, measured on the GPU.
  int device = -1;
  uint64_t uploads = 0;            // batches uploaded
  double upload_gbps = 0;          // pinned host-to-device rate, one batch x 10 (calibration)
  double upload_copy_ms = 0;       // one full batch's copy time at that rate
  double upload_hidden_share = 0;  // 1 - upload_seconds / (uploads x copy time), in [0, 1]
  double kernel_ms = 0;            // NormalizeKernel fp16 on one full batch, median of 10
  double kernel_gbps = 0;          // its bytes read + written per second
  std::string kernel_note;         // why the kernel was not timed (empty when it was)
  // storage, decompression, copy, augment, upload, consumer, or latency (the consumer waited
  // while the fetch threads were mostly idle: hand-off, not a stage)
  std::string bottleneck;
  std::string verdict;  // one line: the bottleneck and why
  // A warning when the run is too short to measure the steady rate (fewer than 4x the prefetch
  // + 1 batches the loader fills ahead); empty otherwise.
  std::string short_run_note;
  // A mixture: one entry per source, and the epoch's samples (all ranks); empty and 0 for one
  // dataset. every_sample_once then means: epoch 0 served each source its share of the quota
  // and, per source, no sample more often than its passes allow (with one rank: exactly
  // floor(c_s / n_s) or that + 1 times, c_s mod n_s samples the latter).
  std::vector<BenchSource> sources;
  uint64_t mixture_samples_per_epoch = 0;
};

// Names the bottleneck of a finished run from its stage times (fills bottleneck and verdict):
// DiagnoseStages (tools/bench/bottleneck.h) on the report's stage times, which `kiln stats` uses
// too.
void Diagnose(BenchReport* report);

// Drops every regular file's pages under `dir` from the page cache (fsync, then
// posix_fadvise(POSIX_FADV_DONTNEED)). Errors: IOError naming the file.
Status DropPageCache(const std::string& dir);
// The share of the bytes of the regular files under `dir` resident in the page cache (mincore).
double ResidentFraction(const std::string& dir);

// `kiln bench --sweep`: runs over thread counts 1, 2, 4, ... up to 2x `cores` (and 2x cores
// itself) and prefetch depths 1, 2, 4, 8.
// A cell whose timed part took under kSweepShortestCellSeconds, or that has a short_run_note,
// measured start-up and scheduling rather than a rate: it is marked too short and never
// recommended.
inline constexpr double kSweepShortestCellSeconds = 0.2;
struct SweepReport {
  std::vector<BenchReport> runs;
  std::vector<bool> comparable;  // per run: long enough to compare (see above)
  // Index in runs: among the comparable runs, the fewest threads, then the shallowest prefetch,
  // within 3% of the best comparable rate. nullopt when no run is comparable (then no setting is
  // recommended; the text says to raise --epochs or use a larger dataset).
  std::optional<size_t> recommended;
  // The run printed above the table: `recommended`, else the fastest run.
  size_t shown = 0;
};
Result<SweepReport> RunSweep(const std::string& dir, const BenchOptions& options, uint32_t cores);
// The same over a mixture of `dirs` (options.mixture set), or one dataset (dirs of one).
Result<SweepReport> RunSweep(const std::vector<std::string>& dirs, const BenchOptions& options,
                             uint32_t cores);
std::string SweepReportJson(const SweepReport& sweep);
std::string SweepReportText(const SweepReport& sweep);

// Errors: as Loader::Open, and the first error a batch carries. With options.loader.device >= 0:
// NotSupported naming why when no GPU is usable ("no NVIDIA driver/GPU found ...") before
// anything is measured (never a host-only figure in its place); CudaStatus errors.
Result<BenchReport> RunBench(const std::string& dir, const BenchOptions& options);
// A mixture of `dirs` when options.mixture is set (its report's `sources` filled, `dir` the
// directories joined by ","), else the one dataset dirs[0]. Errors: as RunBench and
// Loader::OpenMixture; InvalidArgument for several dirs without options.mixture, or none.
Result<BenchReport> RunBench(const std::vector<std::string>& dirs, const BenchOptions& options);

// One JSON object: samples, seconds, samples_per_s, mb_per_s and the other fields.
std::string BenchReportJson(const BenchReport& report);
// One human-readable line.
std::string BenchReportText(const BenchReport& report);

}  // namespace kiln

#endif  // KILN_TOOLS_BENCH_BENCH_RUNNER_H_
