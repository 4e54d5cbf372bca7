// Tests of the loader's statistics (LoaderStats) and their periodic export
// (reader/stats_export.h, reader/stats_export.md): the golden JSON line and .prom file; counters
// that add up against what the consumer received and the wall time; snapshots taken from
// another thread while fetching; the export's lines (schema, monotonic counters, interval grid,
// final line equal to stats() at close); the .prom file's syntax and names; the settings from
// options and environment, and their errors; two loaders on one file; a forked child.
#include "reader/stats_export.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/file_util.h"
#include "reader/loader.h"
#include "reader/loader_clock.h"
#include "tests/reader/test_dataset.h"

namespace kiln {
namespace {

using kiln::testing::MakeSchema;
using kiln::testing::TestDataset;
using kiln::testing::TestDatasetOptions;
using json = nlohmann::json;

const std::string kGoldenDir = std::string(KILN_SOURCE_DIR) + "/tests/data/stats-export";

// A fresh empty directory under the test temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = ::testing::TempDir() + "kiln_stats_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++);
    (void)RemoveTree(path_);
  }
  ~TempDir() { (void)RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets an environment variable for the scope, restoring the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string ReadAll(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  return text.ok() ? *text : std::string();
}

// Waits (without a time bound on the assertion: 60 s only keeps a broken build from hanging)
// until `path` has at least `n` lines.
bool WaitForLines(const std::string& path, size_t n) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ReadLines(path).size() < n) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Reads whole epochs; returns the samples received.
uint64_t ReadEpochs(Loader& loader, int epochs, uint64_t* batches = nullptr) {
  uint64_t samples = 0, n = 0;
  for (int e = 0; e < epochs; ++e) {
    Batch b;
    while (true) {
      Result<bool> more = loader.Next(&b);
      EXPECT_TRUE(more.ok()) << more.status().ToString();
      if (!more.ok() || !*more) break;
      samples += b.size;
      ++n;
    }
  }
  if (batches != nullptr) *batches = n;
  return samples;
}

// The fixed record of the golden files (tests/data/stats-export/README.md).
StatsRecord GoldenRecord() {
  StatsRecord r;
  r.rank = 3;
  r.world_size = 4;
  r.host = "node\"7\"";
  r.pid = 4242;
  r.start_unix_ns = 1767225600000000000u;  // 2026-01-01T00:00:00Z
  r.time_unix_ns = 1767225610000000123u;
  r.elapsed_ns = 10000000123u;
  r.interval_ns = 10000000000u;
  r.final = false;
  r.threads = 2;
  LoaderStats& s = r.stats;
  s.epoch = 1;
  s.io_path = IoMode::kRemote;
  s.batches = 40;
  s.samples = 10240;
  s.bytes = 31457280;
  s.consumer_wait_ns = 1500000000;
  s.fetch_ns = 9000000001;
  s.fetch_cpu_ns = 3000000000;
  s.slot_wait_ns = 250000000;
  s.decompress_ns = 1000000000;
  s.zstd_records = 10240;
  s.augment_ns = 500000000;
  s.chunks = 160;
  s.read_ahead_bytes = 0;
  s.residency_probes = 0;
  s.residency_misses = 0;
  s.direct_reads = 0;
  s.direct_read_bytes = 0;
  s.uploads = 0;
  s.upload_bytes = 0;
  s.upload_wait_ns = 0;
  s.requests.requests = 100;
  s.requests.retries = 2;
  s.requests.failures = 1;
  s.requests.bytes = 33554432;
  s.requests.hedges = 3;
  s.requests.hedge_wins = 1;
  s.requests.cache_reads = 7;
  s.requests.cache_bytes = 5488;
  s.requests.AddLatencyUs(1000);  // 98 attempts near 1 ms, 2 near 100 ms
  for (int k = 0; k < 97; ++k) s.requests.AddLatencyUs(1000);
  s.requests.AddLatencyUs(100000);
  s.requests.AddLatencyUs(100000);
  return r;
}

TEST(StatsExportFormat, GoldenJsonLine) {
  const std::string want = ReadAll(kGoldenDir + "/kiln-stats-rank3.jsonl");
  ASSERT_FALSE(want.empty()) << "missing " << kGoldenDir << "/kiln-stats-rank3.jsonl";
  EXPECT_EQ(StatsJsonLine(GoldenRecord()), want);
}

TEST(StatsExportFormat, GoldenPrometheusText) {
  const std::string want = ReadAll(kGoldenDir + "/kiln-stats-rank3.prom");
  ASSERT_FALSE(want.empty()) << "missing " << kGoldenDir << "/kiln-stats-rank3.prom";
  EXPECT_EQ(StatsPrometheusText(GoldenRecord()), want);
}

// Every field of the contract, with its JSON type; the counters in the spec's order.
void CheckLine(const json& j) {
  EXPECT_EQ(j.at("schema"), "kiln.stats");
  EXPECT_EQ(j.at("version"), 1);
  for (const char* key : {"rank", "world_size", "pid", "start_unix_ns", "time_unix_ns",
                          "elapsed_ns", "interval_ns", "epoch", "threads"}) {
    EXPECT_TRUE(j.at(key).is_number_unsigned()) << key;
  }
  EXPECT_TRUE(j.at("host").is_string());
  EXPECT_TRUE(j.at("final").is_boolean());
  const std::string io = j.at("io_path");
  EXPECT_TRUE(io == "mmap" || io == "direct" || io == "remote") << io;
  const std::vector<std::string> names = {"batches",
                                          "samples",
                                          "bytes",
                                          "consumer_wait_ns",
                                          "fetch_ns",
                                          "fetch_cpu_ns",
                                          "slot_wait_ns",
                                          "decompress_ns",
                                          "zstd_records",
                                          "augment_ns",
                                          "chunks",
                                          "read_ahead_bytes",
                                          "residency_probes",
                                          "residency_misses",
                                          "direct_reads",
                                          "direct_read_bytes",
                                          "uploads",
                                          "upload_bytes",
                                          "upload_wait_ns",
                                          "requests",
                                          "request_retries",
                                          "request_failures",
                                          "request_bytes",
                                          "request_hedges",
                                          "request_hedge_wins",
                                          "request_latency_p50_ns",
                                          "request_latency_p99_ns",
                                          "request_cache_reads",
                                          "request_cache_bytes"};
  const json& c = j.at("counters");
  ASSERT_EQ(c.size(), names.size());
  size_t k = 0;
  for (auto it = c.begin(); it != c.end(); ++it, ++k) {
    EXPECT_TRUE(it.value().is_number_unsigned()) << it.key();
    EXPECT_TRUE(std::find(names.begin(), names.end(), it.key()) != names.end()) << it.key();
  }
}

TEST(StatsExportFormat, CountersFollowTheSpecOrder) {
  // nlohmann::json sorts keys: check the order on the raw text instead.
  const std::string line = StatsJsonLine(GoldenRecord());
  size_t last = 0;
  for (const StatsCounter& c : StatsCounters(GoldenRecord().stats)) {
    const size_t at = line.find(std::string("\"") + c.name + "\":");
    ASSERT_NE(at, std::string::npos) << c.name;
    EXPECT_GT(at, last) << c.name;
    last = at;
  }
  CheckLine(json::parse(line));
}

TEST(LoaderStats, CountersAddUp) {
  TestDatasetOptions o;
  o.num_samples = 1000;
  o.schema = MakeSchema(16, 16, 3);  // 768 bytes: zstd compresses the period-256 pattern
  o.compression.codec = Codec::kZstd;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  LoaderOptions lo;
  lo.batch_size = 32;
  lo.num_threads = 3;
  lo.prefetch = 4;
  const uint64_t start = NowNs();
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  uint64_t batches = 0;
  const uint64_t received = ReadEpochs(**loader, 3, &batches);
  const LoaderStats s = (*loader)->stats();
  const uint64_t wall = NowNs() - start;
  EXPECT_EQ(received, 3000u);
  EXPECT_EQ(s.samples, received);
  EXPECT_EQ(s.batches, batches);
  EXPECT_EQ(s.bytes, received * ds.schema().sample_bytes());
  EXPECT_EQ(s.zstd_records, received);  // every sample read once, none past the epochs
  EXPECT_EQ(s.chunks % batches, 0u);
  EXPECT_EQ(s.epoch, 2u);
  EXPECT_EQ(s.io_path, (*loader)->io_path());
  // Stage times: parts of fetch time, and the threads' times within threads x wall.
  EXPECT_LE(s.fetch_cpu_ns, s.fetch_ns);
  EXPECT_LE(s.decompress_ns + s.augment_ns, s.fetch_ns);
  EXPECT_EQ(s.augment_ns, 0u);
  EXPECT_GT(s.decompress_ns, 0u);
  EXPECT_EQ(s.storage_ns() + s.fetch_cpu_ns, s.fetch_ns);
  EXPECT_LE(s.copy_ns(), s.fetch_cpu_ns);
  EXPECT_LE(s.fetch_ns + s.slot_wait_ns + s.read_ahead_ns, uint64_t{lo.num_threads} * wall);
  EXPECT_LE(s.consumer_wait_ns, wall);
  EXPECT_LE(s.residency_misses, s.residency_probes);
  EXPECT_EQ(s.requests.requests, 0u);
}

// Snapshots from another thread while fetching: every counter only grows, and the last one
// taken after the epochs matches what the consumer received (run under ThreadSanitizer by
// scripts/sanitizers.sh tsan).
TEST(LoaderStats, SnapshotsFromAnotherThreadAreMonotonic) {
  TestDatasetOptions o;
  o.num_samples = 2000;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.num_threads = 2;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> snapshots{0}, regressions{0};
  std::thread watcher([&] {
    std::vector<StatsCounter> last = StatsCounters(LoaderStats());
    while (!done.load()) {
      const std::vector<StatsCounter> now = StatsCounters((*loader)->stats());
      for (size_t k = 0; k < now.size(); ++k) {
        // Latency quantiles are not counters; everything else must not go down.
        if (std::string(now[k].name).find("latency") != std::string::npos) continue;
        if (now[k].value < last[k].value) regressions.fetch_add(1);
      }
      last = now;
      snapshots.fetch_add(1);
    }
  });
  // Reading starts once the watcher is snapshotting (on a loaded machine it may otherwise not
  // be scheduled before the four short epochs are over).
  while (snapshots.load() == 0) std::this_thread::yield();
  const uint64_t received = ReadEpochs(**loader, 4);
  done = true;
  watcher.join();
  EXPECT_EQ(regressions.load(), 0u);
  EXPECT_GT(snapshots.load(), 0u);
  EXPECT_EQ((*loader)->stats().samples, received);
}

// The sample lines of a .prom text: metric name -> (labels -> value). Fails the test on any line
// that is neither a HELP/TYPE comment nor `name{labels} value`, and on a metric without HELP and
// TYPE before its samples.
std::map<std::string, std::map<std::string, double>> ParseProm(const std::string& text) {
  std::map<std::string, std::map<std::string, double>> out;
  std::set<std::string> help, type;
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\} (\S+)$)");
  const std::regex comment(R"(^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, comment)) {
      (m[1] == "HELP" ? help : type).insert(m[2]);
      if (m[1] == "TYPE") {
        EXPECT_TRUE(m[3] == "counter" || m[3] == "gauge") << line;
      }
      continue;
    }
    if (!std::regex_match(line, m, sample)) {
      ADD_FAILURE() << "not a Prometheus sample line: '" << line << "'";
      continue;
    }
    EXPECT_TRUE(help.count(m[1]) && type.count(m[1])) << "no HELP/TYPE before " << line;
    EXPECT_NE(m[2].str().find("rank=\""), std::string::npos) << line;
    out[m[1]][m[2]] = std::stod(m[3]);
  }
  return out;
}

TEST(StatsExportFormat, PromTextParsesWithTheContractNames) {
  const auto metrics = ParseProm(StatsPrometheusText(GoldenRecord()));
  const std::set<std::string> want = {"kiln_batches_total",
                                      "kiln_samples_total",
                                      "kiln_bytes_total",
                                      "kiln_consumer_wait_seconds_total",
                                      "kiln_fetch_seconds_total",
                                      "kiln_fetch_cpu_seconds_total",
                                      "kiln_slot_wait_seconds_total",
                                      "kiln_decompress_seconds_total",
                                      "kiln_augment_seconds_total",
                                      "kiln_upload_wait_seconds_total",
                                      "kiln_remote_requests_total",
                                      "kiln_remote_request_retries_total",
                                      "kiln_remote_request_failures_total",
                                      "kiln_remote_bytes_total",
                                      "kiln_remote_request_hedges_total",
                                      "kiln_remote_request_hedge_wins_total",
                                      "kiln_remote_cache_reads_total",
                                      "kiln_remote_cache_bytes_total",
                                      "kiln_remote_request_latency_seconds",
                                      "kiln_info"};
  std::set<std::string> got;
  for (const auto& m : metrics) got.insert(m.first);
  EXPECT_EQ(got, want);
  EXPECT_EQ(metrics.at("kiln_samples_total").at("rank=\"3\""), 10240);
  EXPECT_DOUBLE_EQ(metrics.at("kiln_fetch_seconds_total").at("rank=\"3\""), 9.000000001);
  EXPECT_EQ(metrics.at("kiln_remote_request_latency_seconds").size(), 2u);
  EXPECT_EQ(metrics.at("kiln_info").at("rank=\"3\",io_path=\"remote\",host=\"node\\\"7\\\"\""), 1);
}

// The export of a running loader: >= 2 interval lines, each valid, counters monotonic, the n-th
// line at or after n intervals, and a final line equal to stats() at close; the .prom file
// holds the same final values.
TEST(StatsExport, WritesLinesAndAFinalLineEqualToStats) {
  TestDatasetOptions o;
  o.num_samples = 500;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  TempDir dir;
  LoaderOptions lo;
  lo.batch_size = 50;
  lo.num_threads = 2;
  lo.rank = 1;
  lo.world_size = 2;
  lo.stats_dir = dir.path() + "/sub/dir";  // created
  lo.stats_interval_s = 0.02;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_NE((*loader)->stats_exporter(), nullptr);
  const std::string jsonl = lo.stats_dir + "/kiln-stats-rank1.jsonl";
  const std::string prom = lo.stats_dir + "/kiln-stats-rank1.prom";
  EXPECT_EQ((*loader)->stats_exporter()->jsonl_path(), jsonl);
  EXPECT_FALSE(ReadAll(prom).empty()) << "the first .prom is written at Create";
  uint64_t received = ReadEpochs(**loader, 1);
  ASSERT_TRUE(WaitForLines(jsonl, 2));
  received += ReadEpochs(**loader, 1);
  const LoaderStats at_close = (*loader)->stats();
  loader->reset();
  EXPECT_EQ(at_close.samples, received);

  const std::vector<std::string> lines = ReadLines(jsonl);
  ASSERT_GE(lines.size(), 3u);
  std::vector<json> parsed;
  for (const std::string& line : lines) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    CheckLine(j);
    parsed.push_back(std::move(j));
  }
  for (size_t k = 0; k < parsed.size(); ++k) {
    const json& j = parsed[k];
    EXPECT_EQ(j["rank"], 1);
    EXPECT_EQ(j["world_size"], 2);
    EXPECT_EQ(j["pid"], ::getpid());
    EXPECT_EQ(j["interval_ns"], 20000000u);
    EXPECT_EQ(j["threads"], 2);
    EXPECT_EQ(j["final"], k + 1 == parsed.size());
    EXPECT_EQ(j["start_unix_ns"], parsed[0]["start_unix_ns"]);
    if (k + 1 < parsed.size()) {
      // Lines sit on the grid start + n x interval (missed ticks skipped, never early).
      EXPECT_GE(j["elapsed_ns"].get<uint64_t>(), (k + 1) * 20000000u) << k;
    }
    if (k == 0) continue;
    const json& prev = parsed[k - 1];
    EXPECT_GE(j["elapsed_ns"].get<uint64_t>(), prev["elapsed_ns"].get<uint64_t>());
    EXPECT_GE(j["time_unix_ns"].get<uint64_t>(), j["start_unix_ns"].get<uint64_t>());
    for (auto it = j["counters"].begin(); it != j["counters"].end(); ++it) {
      EXPECT_GE(it.value().get<uint64_t>(), prev["counters"][it.key()].get<uint64_t>())
          << it.key() << " went down at line " << k;
    }
  }
  const json& last = parsed.back();
  for (const StatsCounter& c : StatsCounters(at_close)) {
    EXPECT_EQ(last["counters"][c.name].get<uint64_t>(), c.value) << c.name;
  }
  EXPECT_EQ(last["epoch"], at_close.epoch);
  EXPECT_EQ(last["io_path"], IoModeName(at_close.io_path));

  const auto metrics = ParseProm(ReadAll(prom));
  EXPECT_EQ(metrics.at("kiln_samples_total").at("rank=\"1\""), static_cast<double>(received));
  EXPECT_EQ(metrics.at("kiln_batches_total").at("rank=\"1\""),
            static_cast<double>(at_close.batches));
  EXPECT_FALSE(ReadAll(prom + ".tmp").size()) << "no temporary file is left";
}

TEST(StatsExport, EnvironmentTurnsItOn) {
  TestDatasetOptions o;
  o.num_samples = 64;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  TempDir dir;
  ScopedEnv env_dir("KILN_STATS_DIR", dir.path());
  ScopedEnv env_interval("KILN_STATS_INTERVAL", "0.5");
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.num_threads = 1;
  {
    Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
    ASSERT_TRUE(loader.ok()) << loader.status().ToString();
    ASSERT_NE((*loader)->stats_exporter(), nullptr);
    EXPECT_EQ((*loader)->stats_exporter()->interval_ns(), 500000000u);
    EXPECT_EQ(ReadEpochs(**loader, 1), 64u);
  }
  const std::vector<std::string> lines = ReadLines(dir.path() + "/kiln-stats-rank0.jsonl");
  ASSERT_GE(lines.size(), 1u);
  const json last = json::parse(lines.back());
  EXPECT_EQ(last["final"], true);
  EXPECT_EQ(last["counters"]["samples"], 64);
  // The option wins over the environment.
  const auto settings = ResolveStatsExport("/elsewhere", 2.0).value();
  ASSERT_TRUE(settings.has_value());
  EXPECT_EQ(settings->dir, "/elsewhere");
  EXPECT_EQ(settings->dir_setting, "LoaderOptions::stats_dir");
  EXPECT_EQ(settings->interval_ns, 2000000000u);
}

TEST(StatsExport, OffByDefault) {
  ::unsetenv("KILN_STATS_DIR");
  const auto settings = ResolveStatsExport("", 0).value();
  EXPECT_FALSE(settings.has_value());
  TestDatasetOptions o;
  o.num_samples = 16;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), LoaderOptions());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ((*loader)->stats_exporter(), nullptr);
}

// An export directory that cannot be made is an IOError at Create naming the path and setting.
TEST(StatsExport, UnwritableDirectoryFailsCreateNamingIt) {
  TestDatasetOptions o;
  o.num_samples = 16;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "-file", "not a directory").ok());
  const std::string bad = dir.path() + "-file/stats";
  LoaderOptions lo;
  lo.stats_dir = bad;
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), StatusCode::kIOError);
  EXPECT_NE(loader.status().message().find(bad), std::string::npos) << loader.status().ToString();
  EXPECT_NE(loader.status().message().find("LoaderOptions::stats_dir"), std::string::npos);
  {
    ScopedEnv env("KILN_STATS_DIR", bad);
    loader = Loader::Create(ds.Open(), LoaderOptions());
    ASSERT_FALSE(loader.ok());
    EXPECT_NE(loader.status().message().find("KILN_STATS_DIR"), std::string::npos)
        << loader.status().ToString();
  }
  // A directory whose .jsonl name is taken by a directory: the file cannot be opened.
  ASSERT_TRUE(std::filesystem::create_directories(dir.path() + "/kiln-stats-rank0.jsonl"));
  lo.stats_dir = dir.path();
  loader = Loader::Create(ds.Open(), lo);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find(dir.path() + "/kiln-stats-rank0.jsonl"),
            std::string::npos)
      << loader.status().ToString();
  // The .prom name taken by a directory: the first rewrite fails at Create, naming the file,
  // and the .jsonl gets no line (no final line of a loader that never was).
  const std::string other = dir.path() + "/other";
  ASSERT_TRUE(std::filesystem::create_directories(other + "/kiln-stats-rank0.prom"));
  lo.stats_dir = other;
  loader = Loader::Create(ds.Open(), lo);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find(other + "/kiln-stats-rank0.prom"), std::string::npos)
      << loader.status().ToString();
  EXPECT_TRUE(ReadLines(other + "/kiln-stats-rank0.jsonl").empty());
  (void)RemoveTree(dir.path() + "-file");
}

TEST(StatsExport, BadIntervalsAreRefusedByName) {
  LoaderOptions lo;
  lo.stats_interval_s = 0.001;
  Status s = ValidateLoaderOptions(lo);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stats_interval_s"), std::string::npos) << s.ToString();
  lo.stats_interval_s = -1;
  EXPECT_FALSE(ValidateLoaderOptions(lo).ok());
  {
    ScopedEnv env("KILN_STATS_INTERVAL", "ten");
    Result<std::optional<StatsExportSettings>> r = ResolveStatsExport("/x", 0);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("KILN_STATS_INTERVAL 'ten'"), std::string::npos)
        << r.status().ToString();
  }
  {
    ScopedEnv env("KILN_STATS_INTERVAL", "0");
    EXPECT_FALSE(ResolveStatsExport("/x", 0).ok());
  }
}

// Two loaders of one process on one file: the oldest writes; the other takes over after it.
TEST(StatsExport, TwoLoadersShareTheFileInTurn) {
  TestDatasetOptions o;
  o.num_samples = 64;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  TempDir dir;
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.num_threads = 1;
  lo.stats_dir = dir.path();
  lo.stats_interval_s = 0.01;
  const std::string jsonl = dir.path() + "/kiln-stats-rank0.jsonl";
  Result<std::unique_ptr<Loader>> first = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Result<std::unique_ptr<Loader>> second = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(WaitForLines(jsonl, 2));
  first->reset();
  const size_t after_first = ReadLines(jsonl).size();
  ASSERT_TRUE(WaitForLines(jsonl, after_first + 2));  // the second took over
  second->reset();
  std::vector<uint64_t> starts;
  for (const std::string& line : ReadLines(jsonl)) {
    const json j = json::parse(line);
    if (starts.empty() || starts.back() != j["start_unix_ns"].get<uint64_t>()) {
      starts.push_back(j["start_unix_ns"].get<uint64_t>());
    }
  }
  // Two runs, one after the other, never interleaved.
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_LT(starts[0], starts[1]);
}

// A child forked while the loader exports writes nothing, even when it destroys its copy.
TEST(StatsExport, ForkedChildWritesNothing) {
  TestDatasetOptions o;
  o.num_samples = 64;
  TestDataset ds(o);
  ASSERT_TRUE(ds.ok());
  TempDir dir;
  LoaderOptions lo;
  lo.batch_size = 16;
  lo.num_threads = 2;
  lo.stats_dir = dir.path();
  lo.stats_interval_s = 0.01;
  const std::string jsonl = dir.path() + "/kiln-stats-rank0.jsonl";
  Result<std::unique_ptr<Loader>> loader = Loader::Create(ds.Open(), lo);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  ASSERT_TRUE(WaitForLines(jsonl, 1));
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    loader->reset();  // the copy's destructor: must leave the parent's exporter alone
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(ReadEpochs(**loader, 1), 64u);
  loader->reset();
  size_t finals = 0;
  for (const std::string& line : ReadLines(jsonl)) {
    const json j = json::parse(line);
    EXPECT_EQ(j["pid"], ::getpid()) << line;
    finals += j["final"].get<bool>();
  }
  EXPECT_EQ(finals, 1u);
}

}  // namespace
}  // namespace kiln
