// kiln::DiagnoseStages: names the stage that limits a loader, from its stage times over some
// stretch of time, and says why in one sentence. One function for `kiln bench` (a whole run,
// BenchReport, through Diagnose in bench_runner.h) and `kiln stats` (one interval of one rank's
// stats export, or a rank's whole run, stats_report.h), so both give the same verdicts.
//
// The verdicts, in the order they are tried:
//   consumer   the consumer waited for batches under 10% of the time (after the first batch):
//              the loader is ahead; its stages do not limit the training loop.
//   storage    the fetch threads spent over 30% of their fetch time off the CPU, more than in
//              their largest CPU stage, and there is evidence of storage reads (below).
//   latency    the consumer waited over half the time while the fetch threads were busy under
//              half of it: batches are handed over slower than they are filled; no stage is.
//   decompression, augment, copy, upload   the largest of these stage times.
//
// Evidence of storage reads. kBench: the direct or remote io path, a cold cache, 64 or more
// major page faults, or under half the files resident at open with some major faults (a remote
// verdict names the range GETs, never page faults or fio). kStats (the export
// has no page-fault or cache figures): the direct or remote io path, or residency probes that
// found samples not in the page cache during the stretch. Without evidence, time off the CPU is
// taken for preemption by other work.
//
// What a kStats verdict leaves out, because the export does not carry it: the process's CPU
// time and the machine's load (kBench adds a note when the process got far less CPU than its
// threads could use), major faults and cache state, the disk's own rate (--disk-mbps), and the
// read order's advice when the order is not known (StageTimes::shuffle empty).
// Thread safety: reentrant. With kBench it reads /proc/loadavg and the number of cores.
#ifndef KILN_TOOLS_BENCH_BOTTLENECK_H_
#define KILN_TOOLS_BENCH_BOTTLENECK_H_

#include <cstdint>
#include <string>

namespace kiln {

// Where the stage times come from: a `kiln bench` run, or a stats export (stats_report.h).
enum class StageSource { kBench, kStats };

// A loader's stage times over one stretch of wall time, in seconds (fetch-thread stages summed
// over the threads; consumer stages on the consumer thread), and what is known of its setting.
// The fields mean what the BenchReport fields of the same names mean (bench_runner.h).
struct StageTimes {
  StageSource source = StageSource::kBench;
  double seconds = 0;                   // wall time of the stretch, > 0 for a verdict
  double consumer_wait_seconds = 0;     // consumer waiting for a batch
  double first_batch_wait_seconds = 0;  // of which for the first batch (0 outside it)
  double consumer_seconds = 0;          // consumer's simulated work (kiln bench --consumer-ms)
  double consumer_ms = 0;               // that work per batch, 0 when none or unknown
  double slot_wait_seconds = 0;         // fetch threads waiting for a free batch slot
  double fetch_seconds = 0;             // fetch threads reading samples (wall)
  double fetch_cpu_seconds = 0;         //   of which on the CPU
  double storage_wait_seconds = 0;      //   of which off the CPU: fetch - fetch_cpu, >= 0
  double decompress_seconds = 0;        // parts of fetch_seconds: zstd,
  double augment_seconds = 0;           //   crop/flip,
  double copy_seconds = 0;              //   and the rest (fetch - decompress - augment, >= 0)
  double upload_seconds = 0;            // host time waiting for device uploads
  double read_ahead_seconds = 0;        // kBench: fetch threads issuing read-ahead
  uint64_t batches = 0;
  uint64_t bytes = 0;  // sample bytes delivered
  uint64_t zstd_records = 0;
  // kBench: the dataset holds JPEG records, whose decode and resize count in copy_seconds.
  bool jpeg_records = false;
  uint32_t threads = 0;      // fetch threads
  double mb_per_s = 0;       // bytes / seconds, 10^6 bytes per second
  double disk_mb_per_s = 0;  // kBench: the storage's own rate, 0 when unknown
  std::string io = "mmap";   // "mmap", "direct" or "remote"
  // "exact", "block" or "none"; empty when not known (kStats without a "shuffle" field): then
  // no advice that depends on the order is given.
  std::string shuffle = "exact";
  uint64_t read_ahead_window_bytes = 0;  // the read-ahead option; 0 off
  std::string memory_fit_warning;        // BenchReport::memory_fit_warning
  // kBench storage evidence and CPU:
  std::string cache = "warm";  // "cold", "warm" or "partly warm"
  double resident_fraction = 0;
  uint64_t major_faults = 0;
  double cpu_seconds = 0;  // process user + system CPU time
  // Direct reads (io "direct"):
  uint64_t direct_reads = 0;
  uint64_t direct_max_in_flight = 0;  // kBench; 0 when unknown
  // kStats storage evidence: residency probes and misses during the stretch (read-ahead), and
  // the remote range GETs (io "remote") with the latency quantiles over the run so far.
  uint64_t residency_probes = 0;
  uint64_t residency_misses = 0;
  uint64_t remote_requests = 0;
  uint64_t remote_retries = 0;
  double remote_p50_ms = 0;
  double remote_p99_ms = 0;
};

struct Bottleneck {
  // storage, decompression, copy, augment, upload, consumer, or latency
  std::string name;
  std::string verdict;  // one line: "bottleneck: NAME. " and what was seen and what to try
};

// The verdict on `times` (see the top of this file).
Bottleneck DiagnoseStages(const StageTimes& times);

}  // namespace kiln

#endif  // KILN_TOOLS_BENCH_BOTTLENECK_H_
