// kiln::StatsExporter: the loader's opt-in periodic export of its statistics (LoaderStats), for
// watching where every rank's data time goes while training runs (`kiln stats` reads it).
//
//   Loader (fetch threads, consumer) --stats() every interval--> exporter thread
//       --> D/kiln-stats-rank{R}.jsonl   one JSON line per interval, appended
//       --> D/kiln-stats-rank{R}.prom    Prometheus text file, rewritten atomically
//
// The byte-level format (fields, units, names, ordering, atomicity, versioning) is
// reader/stats_export.md; this header keeps the contract of the code.
//
// Turned on by LoaderOptions::stats_dir or the environment variable KILN_STATS_DIR (the option
// wins); the interval is LoaderOptions::stats_interval_s, else KILN_STATS_INTERVAL, else 10 s.
// Ownership: a Loader owns its exporter and its one thread; the thread takes a snapshot
// (Loader::stats(), which holds the loader's mutex only to copy the counters) and writes the
// files without any loader lock, so the export never blocks a fetch thread or the consumer.
// At the loader's destruction (after its fetch threads are joined) the exporter writes a last
// line with "final":true, equal to the loader's stats() at that moment, and rewrites the .prom.
// Processes: a forked child never writes (its copy of the exporter has no thread, and its
// Loader's destructor leaves the exporter alone); a loader the child creates exports itself.
// One file per (directory, rank) and process at a time: when several loaders of one process
// export to the same files (a train and a validation loader, or kiln.Loader.load_state_dict's
// replacement), the oldest live one writes and the others wait their turn; when it is
// destroyed, the next oldest takes over at its next interval.
// Errors: an export directory that cannot be created, or files in it that cannot be opened for
// writing, fail Loader::Create (IOError naming the path and the setting that chose it). A
// write that fails later (disk full) prints one warning on stderr naming the file and the
// export goes on; training is never stopped by its statistics.
// Thread safety: the functions are pure and reentrant; a StatsExporter is used by its owner
// (the Loader) only.
#ifndef KILN_READER_STATS_EXPORT_H_
#define KILN_READER_STATS_EXPORT_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "formats/status.h"
#include "reader/loader.h"

namespace kiln {

inline constexpr const char* kStatsSchema = "kiln.stats";  // the "schema" field
inline constexpr uint32_t kStatsVersion = 1;               // the "version" field
inline constexpr double kStatsDefaultIntervalS = 10;       // without option or environment
// The range of an interval in seconds (LoaderOptions::stats_interval_s, KILN_STATS_INTERVAL).
inline constexpr double kStatsMinIntervalS = 0.01;
inline constexpr double kStatsMaxIntervalS = 86400;

// Where and how often a loader exports, resolved from its options and the environment.
struct StatsExportSettings {
  std::string dir;           // the export directory, as given
  uint64_t interval_ns = 0;  // the interval, in [kStatsMinIntervalS, kStatsMaxIntervalS] s
  std::string dir_setting;   // what chose dir: "LoaderOptions::stats_dir" or "KILN_STATS_DIR"
};

// Returns the export settings of a loader with these options: nullopt when both `stats_dir`
// and KILN_STATS_DIR are empty (the export is off). `stats_interval_s` 0 means
// KILN_STATS_INTERVAL when set, else kStatsDefaultIntervalS. Errors: InvalidArgument naming
// KILN_STATS_INTERVAL when its text is not a number of seconds in range.
Result<std::optional<StatsExportSettings>> ResolveStatsExport(const std::string& stats_dir,
                                                              double stats_interval_s);

// Returns OK for 0 or a finite interval in [kStatsMinIntervalS, kStatsMaxIntervalS] seconds,
// else InvalidArgument naming `name` ("stats_interval_s 0.001 must be 0 (the default) or in
// [0.01, 86400] seconds").
Status CheckStatsInterval(double seconds, const std::string& name, bool zero_allowed);

// One export record: one JSON line, one .prom file (reader/stats_export.md).
struct StatsRecord {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  std::string host;            // gethostname()
  int64_t pid = 0;             // the exporting process
  uint64_t start_unix_ns = 0;  // wall clock (CLOCK_REALTIME) when the loader was created
  uint64_t time_unix_ns = 0;   // wall clock when the snapshot was taken
  uint64_t elapsed_ns = 0;     // monotonic time from the loader's creation to the snapshot
  uint64_t interval_ns = 0;    // the configured interval
  bool final = false;          // written at the loader's destruction
  uint32_t threads = 0;        // fetch threads
  LoaderStats stats;           // epoch and io_path included
};

// A named counter of the "counters" object.
struct StatsCounter {
  const char* name;
  uint64_t value;
};
// The "counters" of `stats`, in the order of reader/stats_export.md (batches first,
// request_latency_p99_ns last); latencies are RequestStats quantiles converted to ns.
std::vector<StatsCounter> StatsCounters(const LoaderStats& stats);

// The JSON line of `record`: compact, keys in the spec's order, ending in '\n'.
std::string StatsJsonLine(const StatsRecord& record);
// The .prom file of `record`: Prometheus text exposition format 0.0.4, HELP and TYPE for each
// metric, seconds printed exactly from nanoseconds (9 decimals).
std::string StatsPrometheusText(const StatsRecord& record);
// D/kiln-stats-rank{R}.jsonl and D/kiln-stats-rank{R}.prom.
std::string StatsJsonlPath(const std::string& dir, uint32_t rank);
std::string StatsPromPath(const std::string& dir, uint32_t rank);

// What an exporter writes besides the counters: the loader's identity.
struct StatsExportIdentity {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t threads = 0;
  uint64_t start_unix_ns = 0;    // CLOCK_REALTIME at the loader's creation
  uint64_t start_steady_ns = 0;  // steady clock (NowNs) at the loader's creation
};

class StatsExporter {
 public:
  // Returns the loader's counters now (Loader::stats()); called on the exporter's thread
  // each interval and on the owner's thread by Finish(). Must be safe to call concurrently
  // with the loader's work.
  using Snapshot = std::function<LoaderStats()>;

  // Creates settings.dir (and its parents) when missing, opens the .jsonl for appending,
  // writes a first .prom (a snapshot now) and starts the thread. Errors: IOError naming the
  // directory or file and settings.dir_setting ("cannot write loader statistics to
  // /x/kiln-stats-rank0.jsonl (KILN_STATS_DIR): Permission denied"); IOError when the thread
  // cannot start.
  static Result<std::unique_ptr<StatsExporter>> Start(const StatsExportSettings& settings,
                                                      const StatsExportIdentity& identity,
                                                      Snapshot snapshot);
  // Finish(); in a forked child, leaves the thread and files to the parent.
  ~StatsExporter();
  StatsExporter(const StatsExporter&) = delete;
  StatsExporter& operator=(const StatsExporter&) = delete;

  // Stops the thread and, when this exporter owns the files, writes the final record
  // ("final":true, a snapshot taken now) to both files. Idempotent; a no-op in a forked child.
  void Finish();

  const std::string& jsonl_path() const { return jsonl_path_; }
  const std::string& prom_path() const { return prom_path_; }
  uint64_t interval_ns() const { return settings_.interval_ns; }

 private:
  StatsExporter(StatsExportSettings settings, StatsExportIdentity identity, Snapshot snapshot);
  void Run();  // the thread: a record every interval until stopped
  StatsRecord Take(bool final) const;
  // Writes `record` to both files when this exporter owns them; returns false when it does not.
  bool Write(const StatsRecord& record);
  void Warn(const std::string& path, int error);
  // Stops the thread, writes the final record when asked (Finish) and this exporter owns the
  // files, leaves the registry and closes the .jsonl. Idempotent; a no-op in a forked child.
  void Close(bool write_final);

  const StatsExportSettings settings_;
  const StatsExportIdentity identity_;
  const Snapshot snapshot_;
  const pid_t pid_;
  std::string host_;
  std::string jsonl_path_, prom_path_, key_;  // key_: the canonical .jsonl path
  int jsonl_fd_ = -1;
  bool warned_ = false;  // the thread's, or Finish()'s after the thread ended
  // On the heap so that a forked child's destructor can leave it alone (as Loader's Sync).
  struct Sync {
    std::mutex mu;
    std::condition_variable cv;  // the thread: stop
    bool stop = false;           // guarded by mu
  };
  std::unique_ptr<Sync> sync_ = std::make_unique<Sync>();
  bool finished_ = false;  // the owner's thread only
  std::thread thread_;
};

}  // namespace kiln

#endif  // KILN_READER_STATS_EXPORT_H_
