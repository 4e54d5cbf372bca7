#include "tools/bench/bottleneck.h"

#include <algorithm>
#include <cstdio>
#include <thread>

namespace kiln {

namespace {

std::string Percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

bool FromBench(const StageTimes& r) { return r.source == StageSource::kBench; }

double LoadAverage() {
  double load = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  return load;
}

// The consumer rarely waits in the steady state (after the first batch, whose latency is
// reported on its own): the loader is ahead, whatever its stages cost. Returns true, with the
// verdict written, when that is so.
bool DiagnoseConsumer(const StageTimes& r, Bottleneck* b) {
  const double t = r.seconds;
  const double steady_wait = r.consumer_wait_seconds - r.first_batch_wait_seconds;
  const double steady_t = t - r.first_batch_wait_seconds;
  if (!(steady_t > 0 && steady_wait < 0.10 * steady_t)) return false;
  char buf[512];
  b->name = "consumer";
  std::snprintf(buf, sizeof(buf),
                "bottleneck: consumer. After the first batch it waited for batches only %s of "
                "the time (%s busy in its own work) while the fetch threads waited %.3f s for "
                "free slots: the loader is ahead; more threads or prefetch will not help",
                Percent(steady_wait, steady_t).c_str(),
                r.consumer_ms > 0 ? Percent(r.consumer_seconds, t).c_str() : "mostly",
                r.slot_wait_seconds);
  b->verdict = buf;
  return true;
}

// Whether reads went to storage (bottleneck.h: evidence of storage reads). kBench: storage is in
// play when the pages were dropped, reads faulted to storage often, or most of the files were
// not resident at open and some reads faulted (readahead makes one major fault bring in many
// pages); otherwise time off the CPU is preemption by other work. The direct io path reads
// every record from storage, without page faults.
bool ReadStorage(const StageTimes& r) {
  if (FromBench(r)) {
    return r.io == "direct" || r.io == "remote" || r.cache == "cold" || r.major_faults >= 64 ||
           (r.resident_fraction < 0.5 && r.major_faults > 0);
  }
  return r.io == "direct" || r.io == "remote" || r.residency_misses > 0;
}

// `fetch`: the fetch time, > 0.
bool StorageLimits(const StageTimes& r, double fetch) {
  const bool faulted = ReadStorage(r);
  // The largest stage's time on the CPU: the parts are wall time, which holds the faults too.
  const double cpu = std::min(r.fetch_cpu_seconds, fetch);
  const double cpu_stage =
      std::max({std::min(r.decompress_seconds, cpu), std::min(r.augment_seconds, cpu),
                std::max(0.0, cpu - r.decompress_seconds - r.augment_seconds)});
  return faulted && r.storage_wait_seconds > 0.3 * fetch && r.storage_wait_seconds > cpu_stage;
}

// What the fetch threads were seen waiting for, in a storage verdict.
std::string StorageSeen(const StageTimes& r, double fetch) {
  const double t = r.seconds;
  char buf[512];
  if (r.io == "direct") {
    std::snprintf(buf, sizeof(buf),
                  "bottleneck: storage. The consumer waited %s of the time; the fetch threads "
                  "spent %s of their fetch time waiting for %llu direct reads (up to %llu in "
                  "flight per thread): reads from storage limit the rate",
                  Percent(r.consumer_wait_seconds, t).c_str(),
                  Percent(r.storage_wait_seconds, fetch).c_str(),
                  static_cast<unsigned long long>(r.direct_reads),
                  static_cast<unsigned long long>(r.direct_max_in_flight));
  } else if (r.io == "remote") {  // no page cache or disk: the GETs are the storage
    std::snprintf(
        buf, sizeof(buf),
        "bottleneck: storage. The consumer waited %s of the time; the fetch threads "
        "spent %s of their fetch time off the CPU waiting for %llu range GETs (%llu "
        "retries; latency p50 %.1f ms, p99 %.1f ms over the run): reads from the "
        "remote store limit the rate",
        Percent(r.consumer_wait_seconds, t).c_str(), Percent(r.storage_wait_seconds, fetch).c_str(),
        static_cast<unsigned long long>(r.remote_requests),
        static_cast<unsigned long long>(r.remote_retries), r.remote_p50_ms, r.remote_p99_ms);
  } else if (FromBench(r)) {
    std::snprintf(buf, sizeof(buf),
                  "bottleneck: storage. The consumer waited %s of the time; the fetch threads "
                  "spent %s of their fetch time off the CPU (%.1f s issuing read-ahead) with "
                  "%llu major page faults (%s cache): reads from storage limit the rate",
                  Percent(r.consumer_wait_seconds, t).c_str(),
                  Percent(r.storage_wait_seconds, fetch).c_str(), r.read_ahead_seconds,
                  static_cast<unsigned long long>(r.major_faults), r.cache.c_str());
  } else {
    std::snprintf(buf, sizeof(buf),
                  "bottleneck: storage. The consumer waited %s of the time; the fetch threads "
                  "spent %s of their fetch time off the CPU, and read-ahead found %llu of %llu "
                  "upcoming samples not in the page cache: reads from storage limit the rate",
                  Percent(r.consumer_wait_seconds, t).c_str(),
                  Percent(r.storage_wait_seconds, fetch).c_str(),
                  static_cast<unsigned long long>(r.residency_misses),
                  static_cast<unsigned long long>(r.residency_probes));
  }
  return buf;
}

// The verdict when storage is the bottleneck: what was seen, and what to try.
std::string StorageVerdict(const StageTimes& r, double fetch) {
  char buf[512];
  std::string verdict = StorageSeen(r, fetch);
  if (r.disk_mb_per_s > 0) {
    std::snprintf(buf, sizeof(buf), "; %.0f MB/s is %s of the storage's %.0f MB/s", r.mb_per_s,
                  Percent(r.mb_per_s, r.disk_mb_per_s).c_str(), r.disk_mb_per_s);
    verdict += buf;
  } else if (FromBench(r) && r.io != "remote") {  // fio measures local files, not a URL
    verdict +=
        "; to compare with the storage, measure it on these files (fio, see "
        "bench/larger_than_memory.sh) and pass --disk-mbps";
  }
  if (r.io == "mmap") {
    verdict +=
        "; for data larger than memory read with --io direct (O_DIRECT reads, no page cache "
        "to fill and reclaim)";
  } else if (r.shuffle == "exact") {
    verdict +=
        "; block order (--shuffle block) reads neighbouring records together, and more "
        "read-ahead (--read-ahead-mib) keeps more reads in flight";
  }
  if (r.io == "direct") {
    // The rest is about the mapped path's read-ahead.
  } else if (r.shuffle == "exact") {
    verdict += r.read_ahead_window_bytes == 0
                   ? "; read-ahead is off: turn it on (--read-ahead-mib 16), or read in block "
                     "order (--shuffle block): sequential runs instead of random records"
                   : "; read in block order (--shuffle block) for sequential runs instead of "
                     "random records, or try more read-ahead (--read-ahead-mib) or threads";
  } else if (r.shuffle == "block" && !r.memory_fit_warning.empty()) {
    // Larger blocks would grow the window that already does not fit (BlockMemoryFit).
    verdict += "; " + r.memory_fit_warning;
  } else if (r.shuffle == "block") {
    verdict += "; larger blocks (--block-kib) make longer sequential runs";
  }
  return verdict;
}

// The consumer waited most of the time while the fetch threads were mostly idle: no stage is
// saturated, so naming the largest one would send the user after the wrong fix. The time goes
// to handing batches over (waking threads, starting epochs) or to a CPU the process did not
// get. Returns true, with the verdict written, when that is so.
bool DiagnoseIdle(const StageTimes& r, Bottleneck* b) {
  const double t = r.seconds;
  if (!(t > 0) || r.threads == 0 || r.upload_seconds > 0.5 * t) return false;
  const double busy = r.fetch_seconds / (r.threads * t);
  if (!(busy < 0.5 && r.consumer_wait_seconds > 0.5 * t)) return false;
  char buf[768];
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  b->name = "latency";
  std::snprintf(buf, sizeof(buf),
                "bottleneck: latency, not a stage. The consumer waited %s of the time while the "
                "fetch threads were busy only %s (%u threads; %.3f s fetching, %.3f s waiting for "
                "free slots; %.1f us of fetch work per batch): batches are handed over (threads "
                "woken, epochs started) slower than they are filled, so faster stages would not "
                "help; larger batches (--batch-size) amortise the hand-off",
                Percent(r.consumer_wait_seconds, t).c_str(), Percent(busy, 1.0).c_str(), r.threads,
                r.fetch_seconds, r.slot_wait_seconds,
                r.batches ? r.fetch_seconds * 1e6 / r.batches : 0.0);
  std::string verdict = buf;
  const double usable_cores = std::min<double>(cores, r.threads + 1.0);
  if (FromBench(r) && r.cpu_seconds < 0.6 * usable_cores * t) {
    const double load = LoadAverage();
    if (load > cores) {
      std::snprintf(buf, sizeof(buf),
                    "; the machine is loaded (load average %.1f on %u cores, this process got "
                    "%.0f%% of one core): threads wait to be scheduled",
                    load, cores, 100.0 * r.cpu_seconds / t);
      verdict += buf;
    }
  }
  b->verdict = verdict;
  return true;
}

// The verdict when a CPU stage (or the upload) is the bottleneck: the largest of them.
void DiagnoseStage(const StageTimes& r, double fetch, Bottleneck* b) {
  const double t = r.seconds;
  char buf[512];
  const double busy = r.threads && t > 0 ? r.fetch_seconds / (r.threads * t) : 0;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  struct Stage {
    const char* name;
    double seconds;
  };
  const Stage stages[] = {{"decompression", r.decompress_seconds},
                          {"augment", r.augment_seconds},
                          {"copy", r.copy_seconds},
                          {"upload", r.upload_seconds}};
  const Stage* top = &stages[0];
  for (const Stage& s : stages) {
    if (s.seconds > top->seconds) top = &s;
  }
  b->name = top->name;
  std::string why;
  if (b->name == "decompression") {
    std::snprintf(buf, sizeof(buf),
                  "zstd took %s of the fetch time (%llu records, %.2f us each): store records "
                  "raw (--compress none) if the data fits the page cache, or add threads",
                  Percent(r.decompress_seconds, fetch).c_str(),
                  static_cast<unsigned long long>(r.zstd_records),
                  r.zstd_records ? r.decompress_seconds * 1e6 / r.zstd_records : 0.0);
  } else if (b->name == "augment") {
    std::snprintf(buf, sizeof(buf), "crop/flip took %s of the fetch time: add threads",
                  Percent(r.augment_seconds, fetch).c_str());
  } else if (r.jpeg_records) {
    std::snprintf(buf, sizeof(buf),
                  "JPEG decoding and the resize into the batch slots (with index lookup and "
                  "checksum) took %s of the fetch time: add threads, or pack a smaller "
                  "--max-side",
                  Percent(r.copy_seconds, fetch).c_str());
  } else {
    std::snprintf(buf, sizeof(buf),
                  "index lookup, checksum and copy into the batch slots took %s of the fetch time "
                  "(%.0f MB/s per busy thread, %llu zstd records): memory bandwidth and latency "
                  "limit the rate",
                  Percent(r.copy_seconds, fetch).c_str(),
                  r.fetch_seconds > 0 ? r.bytes / 1e6 / r.fetch_seconds : 0.0,
                  static_cast<unsigned long long>(r.zstd_records));
  }
  why = buf;
  // A starved process looks like an idle loader: say so when the CPU it got is far below what
  // its threads could use (other load on the machine).
  const double usable_cores = std::min<double>(cores, r.threads + 1.0);
  if (FromBench(r) && t > 0 && r.cpu_seconds < 0.6 * usable_cores * t) {
    const double load = LoadAverage();
    std::snprintf(buf, sizeof(buf),
                  "; note: the process got only %.0f%% of one core while the consumer waited: "
                  "other work competes for the CPU (load average %.1f on %u cores), so these "
                  "figures understate the loader",
                  100.0 * r.cpu_seconds / t, load, cores);
    why += buf;
  }
  if (FromBench(r)) {
    std::snprintf(buf, sizeof(buf),
                  "bottleneck: %s. The consumer waited %s of the time; fetch threads busy %s "
                  "(%u threads on %u cores, process CPU %.0f%% of one core); ",
                  top->name, Percent(r.consumer_wait_seconds, t).c_str(),
                  Percent(busy, 1.0).c_str(), r.threads, cores,
                  t > 0 ? 100.0 * r.cpu_seconds / t : 0.0);
  } else {
    std::snprintf(buf, sizeof(buf),
                  "bottleneck: %s. The consumer waited %s of the time; fetch threads busy %s "
                  "(%u threads); ",
                  top->name, Percent(r.consumer_wait_seconds, t).c_str(),
                  Percent(busy, 1.0).c_str(), r.threads);
  }
  b->verdict = buf + why;
}

}  // namespace

Bottleneck DiagnoseStages(const StageTimes& r) {
  Bottleneck b;
  if (DiagnoseConsumer(r, &b)) return b;
  const double fetch = std::max(r.fetch_seconds, 1e-12);
  if (StorageLimits(r, fetch)) {
    b.name = "storage";
    b.verdict = StorageVerdict(r, fetch);
    return b;
  }
  if (DiagnoseIdle(r, &b)) return b;
  DiagnoseStage(r, fetch, &b);
  return b;
}

}  // namespace kiln
