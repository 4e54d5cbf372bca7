#include "reader/stats_export.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "reader/loader_clock.h"

namespace kiln {

namespace {

uint64_t UnixNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// Which exporter of a process writes each pair of files: the oldest live one registered for
// its canonical .jsonl path. A forked child starts with an empty registry (its copies of the
// parent's exporters have no thread), and the fork handlers keep the mutex consistent: it is
// held across fork() so no other thread of the parent holds it in the child's copy.
struct Registry {
  std::mutex mu;
  std::map<std::string, std::vector<const StatsExporter*>> owners;  // guarded by mu
};

Registry& TheRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry();  // never destroyed: exporters may outlive static destruction
    ::pthread_atfork([] { TheRegistry().mu.lock(); }, [] { TheRegistry().mu.unlock(); },
                     [] {
                       Registry& child = TheRegistry();
                       child.owners.clear();
                       child.mu.unlock();
                     });
    return r;
  }();
  return *registry;
}

// Writes all of `text` to `fd`; returns 0 or the errno of the failure.
int WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Writes `text` to `path` atomically (path.tmp, then rename; no fsync: statistics need not
// survive a crash, and a sync every interval would cost the disk); returns 0 or an errno.
int RewriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int error = WriteAll(fd, text);
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) ::unlink(tmp.c_str());
  return error;
}

// Seconds from nanoseconds, exactly: "12.000345678".
std::string Seconds(uint64_t ns) {
  char text[48];
  std::snprintf(text, sizeof(text), "%llu.%09llu",
                static_cast<unsigned long long>(ns / 1000000000u),
                static_cast<unsigned long long>(ns % 1000000000u));
  return text;
}

// A Prometheus label value: backslash, double quote and newline escaped.
std::string LabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

uint64_t LatencyNs(const RequestStats& requests, double q) {
  return static_cast<uint64_t>(requests.LatencyQuantileUs(q)) * 1000u;
}

}  // namespace

Status CheckStatsInterval(double seconds, const std::string& name, bool zero_allowed) {
  if (zero_allowed && seconds == 0) return Status::Ok();
  if (std::isfinite(seconds) && seconds >= kStatsMinIntervalS && seconds <= kStatsMaxIntervalS) {
    return Status::Ok();
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return Status::InvalidArgument(name + " " + text + " must be " +
                                 (zero_allowed ? "0 (the default) or " : "") +
                                 "in [0.01, 86400] seconds");
}

Result<std::optional<StatsExportSettings>> ResolveStatsExport(const std::string& stats_dir,
                                                              double stats_interval_s) {
  StatsExportSettings s;
  if (!stats_dir.empty()) {
    s.dir = stats_dir;
    s.dir_setting = "LoaderOptions::stats_dir";
  } else {
    const char* env = std::getenv("KILN_STATS_DIR");
    if (env == nullptr || *env == '\0') return std::optional<StatsExportSettings>();
    s.dir = env;
    s.dir_setting = "KILN_STATS_DIR";
  }
  double seconds = stats_interval_s;
  KILN_RETURN_IF_ERROR(CheckStatsInterval(seconds, "stats_interval_s", /*zero_allowed=*/true));
  if (seconds == 0) {
    seconds = kStatsDefaultIntervalS;
    const char* env = std::getenv("KILN_STATS_INTERVAL");
    if (env != nullptr && *env != '\0') {
      char* end = nullptr;
      errno = 0;
      seconds = std::strtod(env, &end);
      if (end == env || *end != '\0' || errno != 0) {
        return Status::InvalidArgument(std::string("KILN_STATS_INTERVAL '") + env +
                                       "' must be a number of seconds in [0.01, 86400]");
      }
      KILN_RETURN_IF_ERROR(CheckStatsInterval(seconds, "KILN_STATS_INTERVAL", false));
    }
  }
  s.interval_ns = static_cast<uint64_t>(std::llround(seconds * 1e9));
  return std::optional<StatsExportSettings>(std::move(s));
}

std::vector<StatsCounter> StatsCounters(const LoaderStats& s) {
  return {
      {"batches", s.batches},
      {"samples", s.samples},
      {"bytes", s.bytes},
      {"consumer_wait_ns", s.consumer_wait_ns},
      {"fetch_ns", s.fetch_ns},
      {"fetch_cpu_ns", s.fetch_cpu_ns},
      {"slot_wait_ns", s.slot_wait_ns},
      {"decompress_ns", s.decompress_ns},
      {"zstd_records", s.zstd_records},
      {"augment_ns", s.augment_ns},
      {"chunks", s.chunks},
      {"read_ahead_bytes", s.read_ahead_bytes},
      {"residency_probes", s.residency_probes},
      {"residency_misses", s.residency_misses},
      {"direct_reads", s.direct_reads},
      {"direct_read_bytes", s.direct_read_bytes},
      {"uploads", s.uploads},
      {"upload_bytes", s.upload_bytes},
      {"upload_wait_ns", s.upload_wait_ns},
      {"requests", s.requests.requests},
      {"request_retries", s.requests.retries},
      {"request_failures", s.requests.failures},
      {"request_bytes", s.requests.bytes},
      {"request_hedges", s.requests.hedges},
      {"request_hedge_wins", s.requests.hedge_wins},
      {"request_latency_p50_ns", LatencyNs(s.requests, 0.5)},
      {"request_latency_p99_ns", LatencyNs(s.requests, 0.99)},
      {"request_cache_reads", s.requests.cache_reads},
      {"request_cache_bytes", s.requests.cache_bytes},
  };
}

std::string StatsJsonLine(const StatsRecord& r) {
  nlohmann::ordered_json j;
  j["schema"] = kStatsSchema;
  j["version"] = kStatsVersion;
  j["rank"] = r.rank;
  j["world_size"] = r.world_size;
  j["host"] = r.host;
  j["pid"] = r.pid;
  j["start_unix_ns"] = r.start_unix_ns;
  j["time_unix_ns"] = r.time_unix_ns;
  j["elapsed_ns"] = r.elapsed_ns;
  j["interval_ns"] = r.interval_ns;
  j["final"] = r.final;
  j["epoch"] = r.stats.epoch;
  j["io_path"] = IoModeName(r.stats.io_path);
  j["threads"] = r.threads;
  nlohmann::ordered_json counters = nlohmann::ordered_json::object();
  for (const StatsCounter& c : StatsCounters(r.stats)) counters[c.name] = c.value;
  j["counters"] = std::move(counters);
  // Invalid UTF-8 (a host name) is replaced rather than thrown: the line is always written.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string StatsPrometheusText(const StatsRecord& r) {
  const LoaderStats& s = r.stats;
  const std::string rank = "rank=\"" + std::to_string(r.rank) + "\"";
  std::string out;
  const auto metric = [&](const char* name, const char* type, const char* help,
                          const std::string& value) {
    out += std::string("# HELP ") + name + " " + help + "\n";
    out += std::string("# TYPE ") + name + " " + type + "\n";
    out += std::string(name) + "{" + rank + "} " + value + "\n";
  };
  const auto count = [&](const char* name, const char* help, uint64_t value) {
    metric(name, "counter", help, std::to_string(value));
  };
  const auto seconds = [&](const char* name, const char* help, uint64_t ns) {
    metric(name, "counter", help, Seconds(ns));
  };
  count("kiln_batches_total", "Batches the loader returned to the training loop.", s.batches);
  count("kiln_samples_total", "Samples in the batches returned.", s.samples);
  count("kiln_bytes_total", "Sample bytes in the batches returned.", s.bytes);
  seconds("kiln_consumer_wait_seconds_total",
          "Time the training loop waited in Next() for a batch to be filled.", s.consumer_wait_ns);
  seconds("kiln_fetch_seconds_total", "Time fetch threads spent filling batches, all threads.",
          s.fetch_ns);
  seconds("kiln_fetch_cpu_seconds_total",
          "CPU time of the fetch threads while filling batches; fetch minus this is storage.",
          s.fetch_cpu_ns);
  seconds("kiln_slot_wait_seconds_total",
          "Time fetch threads waited for a free batch slot (the consumer is slower).",
          s.slot_wait_ns);
  seconds("kiln_decompress_seconds_total", "Time in zstd decompression.", s.decompress_ns);
  seconds("kiln_augment_seconds_total", "Time in crop and flip (estimated from every 8th sample).",
          s.augment_ns);
  seconds("kiln_upload_wait_seconds_total",
          "Host time waiting for device uploads before a slot was reused.", s.upload_wait_ns);
  count("kiln_remote_requests_total", "Range GET attempts sent, retries included.",
        s.requests.requests);
  count("kiln_remote_request_retries_total", "Range GET attempts that were retries.",
        s.requests.retries);
  count("kiln_remote_request_failures_total", "Remote reads that completed with an error.",
        s.requests.failures);
  count("kiln_remote_bytes_total", "Body bytes received from remote storage.", s.requests.bytes);
  count("kiln_remote_request_hedges_total",
        "Hedged requests: second range GETs sent for reads past the hedging threshold.",
        s.requests.hedges);
  count("kiln_remote_request_hedge_wins_total", "Hedged reads whose second request finished first.",
        s.requests.hedge_wins);
  count("kiln_remote_cache_reads_total",
        "Remote reads served from the local cache instead of a request.", s.requests.cache_reads);
  count("kiln_remote_cache_bytes_total", "Bytes of the reads served from the local cache.",
        s.requests.cache_bytes);
  const char* latency = "kiln_remote_request_latency_seconds";
  out += std::string("# HELP ") + latency +
         " Latency quantile of all remote request attempts so far (histogram bucket bound).\n";
  out += std::string("# TYPE ") + latency + " gauge\n";
  out += std::string(latency) + "{" + rank + ",quantile=\"0.5\"} " +
         Seconds(LatencyNs(s.requests, 0.5)) + "\n";
  out += std::string(latency) + "{" + rank + ",quantile=\"0.99\"} " +
         Seconds(LatencyNs(s.requests, 0.99)) + "\n";
  out += "# HELP kiln_info The loader's io path and host; the value is always 1.\n";
  out += "# TYPE kiln_info gauge\n";
  out += "kiln_info{" + rank + ",io_path=\"" + IoModeName(s.io_path) + "\",host=\"" +
         LabelValue(r.host) + "\"} 1\n";
  return out;
}

std::string StatsJsonlPath(const std::string& dir, uint32_t rank) {
  return dir + "/kiln-stats-rank" + std::to_string(rank) + ".jsonl";
}

std::string StatsPromPath(const std::string& dir, uint32_t rank) {
  return dir + "/kiln-stats-rank" + std::to_string(rank) + ".prom";
}

StatsExporter::StatsExporter(StatsExportSettings settings, StatsExportIdentity identity,
                             Snapshot snapshot)
    : settings_(std::move(settings)),
      identity_(identity),
      snapshot_(std::move(snapshot)),
      pid_(::getpid()),
      host_(HostName()),
      jsonl_path_(StatsJsonlPath(settings_.dir, identity_.rank)),
      prom_path_(StatsPromPath(settings_.dir, identity_.rank)) {}

Result<std::unique_ptr<StatsExporter>> StatsExporter::Start(const StatsExportSettings& settings,
                                                            const StatsExportIdentity& identity,
                                                            Snapshot snapshot) {
  std::unique_ptr<StatsExporter> e(new StatsExporter(settings, identity, std::move(snapshot)));
  const std::string setting = " (" + settings.dir_setting + ")";
  std::error_code ec;
  std::filesystem::create_directories(settings.dir, ec);
  if (ec) {
    return Status::IOError("cannot create the loader statistics directory " + settings.dir +
                           setting + ": " + ec.message());
  }
  e->jsonl_fd_ = ::open(e->jsonl_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (e->jsonl_fd_ < 0) {
    e->finished_ = true;
    return Status::IOError("cannot write loader statistics to " + e->jsonl_path_ + setting + ": " +
                           std::strerror(errno));
  }
  e->key_ = std::filesystem::weakly_canonical(e->jsonl_path_, ec).string();
  if (ec) e->key_ = e->jsonl_path_;
  {
    Registry& registry = TheRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.owners[e->key_].push_back(e.get());
  }
  // The first .prom, now: checks that the directory takes the atomic rewrite too.
  const StatsRecord first = e->Take(false);
  Registry& registry = TheRegistry();
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    owner = registry.owners[e->key_].front() == e.get();
  }
  if (owner) {
    const int error = RewriteFile(e->prom_path_, StatsPrometheusText(first));
    if (error != 0) {
      e->Close(/*write_final=*/false);
      return Status::IOError("cannot write loader statistics to " + e->prom_path_ + setting + ": " +
                             std::strerror(error));
    }
  }
  try {
    e->thread_ = std::thread([raw = e.get()] { raw->Run(); });
  } catch (const std::system_error& err) {
    e->Close(/*write_final=*/false);
    return Status::IOError("cannot start the loader statistics thread for " + e->jsonl_path_ +
                           ": " + err.what());
  }
  return e;
}

StatsRecord StatsExporter::Take(bool final) const {
  StatsRecord r;
  r.stats = snapshot_();
  const uint64_t now = NowNs();
  r.time_unix_ns = UnixNowNs();
  r.rank = identity_.rank;
  r.world_size = identity_.world_size;
  r.host = host_;
  r.pid = pid_;
  r.start_unix_ns = identity_.start_unix_ns;
  r.elapsed_ns = now > identity_.start_steady_ns ? now - identity_.start_steady_ns : 0;
  r.interval_ns = settings_.interval_ns;
  r.final = final;
  r.threads = identity_.threads;
  return r;
}

bool StatsExporter::Write(const StatsRecord& record) {
  {
    Registry& registry = TheRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.owners.find(key_);
    if (it == registry.owners.end() || it->second.front() != this) return false;
  }
  // One write() of the whole line on an O_APPEND descriptor: lines never interleave.
  int error = WriteAll(jsonl_fd_, StatsJsonLine(record));
  if (error != 0) Warn(jsonl_path_, error);
  error = RewriteFile(prom_path_, StatsPrometheusText(record));
  if (error != 0) Warn(prom_path_, error);
  return true;
}

void StatsExporter::Warn(const std::string& path, int error) {
  if (warned_) return;
  warned_ = true;
  std::fprintf(stderr,
               "kiln: cannot write loader statistics to %s: %s (the export goes on; further "
               "failures are not reported)\n",
               path.c_str(), std::strerror(error));
}

void StatsExporter::Run() {
  const uint64_t t0 = NowNs();
  const uint64_t interval = settings_.interval_ns;
  uint64_t tick = 1;
  std::unique_lock<std::mutex> lock(sync_->mu);
  while (true) {
    const auto deadline = std::chrono::steady_clock::time_point(
        std::chrono::nanoseconds(static_cast<int64_t>(t0 + tick * interval)));
    if (sync_->cv.wait_until(lock, deadline, [this] { return sync_->stop; })) return;
    lock.unlock();
    (void)Write(Take(false));
    lock.lock();
    // Ticks stay on the grid t0 + k x interval; ticks missed by a slow write are skipped.
    tick = (NowNs() - t0) / interval + 1;
  }
}

void StatsExporter::Finish() { Close(/*write_final=*/true); }

void StatsExporter::Close(bool write_final) {
  if (::getpid() != pid_ || finished_) return;
  finished_ = true;
  {
    std::lock_guard<std::mutex> lock(sync_->mu);
    sync_->stop = true;
  }
  sync_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  if (write_final) (void)Write(Take(true));
  {
    Registry& registry = TheRegistry();
    std::lock_guard<std::mutex> lock(registry.mu);
    auto it = registry.owners.find(key_);
    if (it != registry.owners.end()) {
      std::vector<const StatsExporter*>& list = it->second;
      for (size_t k = 0; k < list.size(); ++k) {
        if (list[k] == this) {
          list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
          break;
        }
      }
      if (list.empty()) registry.owners.erase(it);
    }
  }
  ::close(jsonl_fd_);
  jsonl_fd_ = -1;
}

StatsExporter::~StatsExporter() {
  if (::getpid() != pid_) {
    // A forked child's copy: the thread is the parent's and the mutex and condition variable
    // may be in use there (pthread_cond_destroy could wait forever). Leave them, write nothing.
    (void)new std::thread(std::move(thread_));  // never joined nor destroyed
    (void)sync_.release();
    return;
  }
  Finish();
}

}  // namespace kiln
