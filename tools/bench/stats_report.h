// The reader of the loader's stats export behind `kiln stats`: which rank is slowest, how much of
// its time each rank's training loop waited for data, and which stage limits it, per interval.
//
// Input: the JSON-lines files the loader appends, D/kiln-stats-rank{R}.jsonl, one object per
// interval (schema "kiln.stats", version 1; the byte-level contract is reader/stats_export.md,
// where the writer is). Counters there are cumulative since the loader started; one run of a
// loader is one `start_unix_ns` (a restarted job appends a new run to the same file). This
// reader takes the differences of consecutive lines of one run (a delta: one interval of one
// rank) and aligns the ranks on time buckets as wide as the export interval: a delta belongs to
// the bucket of its midpoint (time_unix_ns of its two lines), counted from the earliest first
// line of any run; two deltas of one rank in one bucket are added. Per bucket and rank:
//   seconds       = Δelapsed_ns / 1e9 (wall)
//   wait_share    = Δconsumer_wait_ns / Δelapsed_ns: the share of time the loop waited for data
//   samples_per_s = Δsamples / seconds
//   stages        StageTimes (tools/bench/bottleneck.h, source kStats) of the Δ counters:
//                 storage wait = fetch - fetch_cpu, copy = fetch - decompress - augment (>= 0)
//   bottleneck    DiagnoseStages(stages): the verdicts of `kiln bench`
// The slowest rank of a bucket is the one, of those not idle (RankInterval::idle), with the
// lowest samples/s (ties: the highest wait share, then the lowest rank); the summary does the
// same over each rank's whole export (all its runs summed).
//
// Errors (Corruption; every message names the file, and the line, 1-based, when there is one): a
// line that is not JSON (a last line without its newline that is not JSON is taken for one still
// being written and skipped, with a warning), a "schema" other than "kiln.stats", a "version" other
// than 1, a field of the contract missing or of the wrong type, a counter (or elapsed_ns) going
// backwards within one run (elapsed_ns must grow), a file with fewer than two lines (no interval),
// one rank's run in two files; NotFound for a path that does not exist or a directory without
// kiln-stats-rank*.jsonl files; IOError when a file cannot be read. Fields the contract does not
// name are ignored (later versions add fields); an optional "shuffle" string (the read order) is
// used when present. Thread safety: reentrant; no state.
#ifndef KILN_TOOLS_BENCH_STATS_REPORT_H_
#define KILN_TOOLS_BENCH_STATS_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "tools/bench/bottleneck.h"

namespace kiln {

inline constexpr char kStatsSchema[] = "kiln.stats";
inline constexpr uint64_t kStatsVersion = 1;

// One rank over one bucket (or, in RankSummary, over its whole export).
struct RankInterval {
  uint32_t rank = 0;
  std::string host;
  double seconds = 0;  // wall time of the deltas, > 0
  uint64_t samples = 0;
  double samples_per_s = 0;
  // consumer wait / wall, capped at 1: the counter grows when a wait ends, so a wait that began
  // in an earlier interval is counted whole in the one it ends in (stages.consumer_wait_seconds
  // is capped at `seconds` the same way, so the verdict never says more than 100%).
  double wait_share = 0;
  // No sample delivered, the loop waited under half the time, and the fetch threads spent at
  // least half of it waiting for free slots: the loop was not asking for data (the end of
  // training, evaluation, a checkpoint), or the interval ends at the loader's close (final).
  // An idle rank is never the slowest. No sample delivered otherwise is a stall (bottleneck
  // "stalled", not DiagnoseStages): the loop is in a wait that has not ended yet (its wait share
  // reads low until it does), and the rank is at 0 samples/s.
  bool idle = false;
  bool final = false;  // the last delta ends at a "final" line (written at the loader's close)
  StageTimes stages;
  Bottleneck bottleneck;
};

struct StatsInterval {
  uint64_t bucket = 0;  // index of the bucket from the report's start; buckets without any
                        // delta are not listed
  double start_s = 0;   // bucket * interval, seconds since StatsReport::start_unix_ns
  double end_s = 0;
  std::vector<RankInterval> ranks;  // the ranks with a delta in it, by rank
  std::optional<size_t> slowest;    // index into ranks; none when every rank was idle
};

struct RankSummary {
  RankInterval total;       // all the rank's deltas summed
  uint32_t intervals = 0;   // buckets it has a delta in
  uint32_t slowest_in = 0;  // buckets in which it is the slowest
  uint32_t runs = 0;        // runs (start_unix_ns) of the rank
};

struct StatsReport {
  std::vector<std::string> files;        // as read, after expanding directories
  uint32_t world_size = 0;               // the largest world_size of any line
  uint64_t interval_ns = 0;              // bucket width: the largest interval_ns of any line
  uint64_t start_unix_ns = 0;            // time_unix_ns of the earliest first line of a run
  uint32_t runs = 0;                     // (rank, start_unix_ns) pairs
  std::vector<StatsInterval> intervals;  // by bucket
  std::vector<RankSummary> ranks;        // by rank
  size_t worst = 0;                      // index into ranks: the slowest over the whole export
  std::vector<std::string> warnings;     // e.g. a partial last line skipped; "FILE:LINE: ..."
};

// The files named by `args`: a file as it is, a directory as its kiln-stats-rank*.jsonl files
// in rank order (rank 2 before rank 10). Errors: NotFound (see the top of this file).
Result<std::vector<std::string>> ExpandStatsPaths(const std::vector<std::string>& args);

// Reads `files` (not directories; ExpandStatsPaths) and computes the report. Errors: see the top
// of this file; also InvalidArgument when `files` is empty.
Result<StatsReport> ReadStatsReport(const std::vector<std::string>& files);

// The report for people: one block per interval (the slowest rank, each rank's wait share, the
// slowest rank's verdict) and the summary (each rank, the worst rank and its verdict).
std::string StatsReportText(const StatsReport& report);
// One JSON object: ok, schema, version, files, world_size, interval_s, start_unix_ns, runs,
// intervals (bucket, start_s, end_s, slowest_rank (null when all were idle), ranks: rank, host,
// seconds, samples, samples_per_s, wait_share, idle, bottleneck, verdict, stages), summary
// (worst_rank, ranks: the same per rank over its whole export, with intervals, slowest_in, runs)
// and warnings.
std::string StatsReportJson(const StatsReport& report);

}  // namespace kiln

#endif  // KILN_TOOLS_BENCH_STATS_REPORT_H_
