#include "tools/bench/stats_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <utility>

namespace kiln {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The counters of one line (stats_export.md), cumulative since the loader started.
struct Counters {
  uint64_t batches = 0, samples = 0, bytes = 0;
  uint64_t consumer_wait_ns = 0, fetch_ns = 0, fetch_cpu_ns = 0, slot_wait_ns = 0;
  uint64_t decompress_ns = 0, zstd_records = 0, augment_ns = 0, chunks = 0;
  uint64_t read_ahead_bytes = 0, residency_probes = 0, residency_misses = 0;
  uint64_t direct_reads = 0, direct_read_bytes = 0;
  uint64_t uploads = 0, upload_bytes = 0, upload_wait_ns = 0;
  uint64_t requests = 0, request_retries = 0, request_failures = 0, request_bytes = 0;
  uint64_t request_latency_p50_ns = 0, request_latency_p99_ns = 0;
};

struct CounterField {
  const char* name;
  uint64_t Counters::*member;
  bool monotonic;  // the latency quantiles are not counters
};

constexpr CounterField kCounterFields[] = {
    {"batches", &Counters::batches, true},
    {"samples", &Counters::samples, true},
    {"bytes", &Counters::bytes, true},
    {"consumer_wait_ns", &Counters::consumer_wait_ns, true},
    {"fetch_ns", &Counters::fetch_ns, true},
    {"fetch_cpu_ns", &Counters::fetch_cpu_ns, true},
    {"slot_wait_ns", &Counters::slot_wait_ns, true},
    {"decompress_ns", &Counters::decompress_ns, true},
    {"zstd_records", &Counters::zstd_records, true},
    {"augment_ns", &Counters::augment_ns, true},
    {"chunks", &Counters::chunks, true},
    {"read_ahead_bytes", &Counters::read_ahead_bytes, true},
    {"residency_probes", &Counters::residency_probes, true},
    {"residency_misses", &Counters::residency_misses, true},
    {"direct_reads", &Counters::direct_reads, true},
    {"direct_read_bytes", &Counters::direct_read_bytes, true},
    {"uploads", &Counters::uploads, true},
    {"upload_bytes", &Counters::upload_bytes, true},
    {"upload_wait_ns", &Counters::upload_wait_ns, true},
    {"requests", &Counters::requests, true},
    {"request_retries", &Counters::request_retries, true},
    {"request_failures", &Counters::request_failures, true},
    {"request_bytes", &Counters::request_bytes, true},
    {"request_latency_p50_ns", &Counters::request_latency_p50_ns, false},
    {"request_latency_p99_ns", &Counters::request_latency_p99_ns, false},
};

// One line of an export, as read.
struct Line {
  size_t file = 0;  // index into the report's files
  uint64_t number = 0;
  uint32_t rank = 0, world_size = 0, threads = 0;
  std::string host, io_path, shuffle;
  bool final = false;
  uint64_t start_unix_ns = 0, time_unix_ns = 0, elapsed_ns = 0, interval_ns = 0;
  Counters c;
};

std::string Where(const std::string& file, uint64_t line) {
  return file + ":" + std::to_string(line) + ": ";
}

Status BadLine(const std::string& file, uint64_t line, const std::string& what) {
  return Status::Corruption(Where(file, line) + what);
}

Result<uint64_t> Unsigned(const json& obj, const char* key, const std::string& prefix,
                          const std::string& file, uint64_t line) {
  auto it = obj.find(key);
  if (it == obj.end()) return BadLine(file, line, "field " + prefix + key + " is missing");
  if (!it->is_number_unsigned()) {
    return BadLine(file, line,
                   "field " + prefix + key + " is not an unsigned integer: " + it->dump());
  }
  return it->get<uint64_t>();
}

Result<std::string> Text(const json& obj, const char* key, const std::string& file, uint64_t line) {
  auto it = obj.find(key);
  if (it == obj.end()) return BadLine(file, line, std::string("field ") + key + " is missing");
  if (!it->is_string()) {
    return BadLine(file, line, std::string("field ") + key + " is not a string: " + it->dump());
  }
  return it->get<std::string>();
}

Result<Line> ParseLine(const json& j, const std::string& file, uint64_t number) {
  if (!j.is_object()) return BadLine(file, number, "not a JSON object");
  auto schema = j.find("schema");
  if (schema == j.end() || !schema->is_string()) {
    return BadLine(file, number, "no \"schema\" string: not a kiln stats export");
  }
  if (*schema != kStatsSchema) {
    return BadLine(file, number, "schema is " + schema->dump() + ", not \"" + kStatsSchema + "\"");
  }
  KILN_ASSIGN_OR_RETURN(uint64_t version, Unsigned(j, "version", "", file, number));
  if (version != kStatsVersion) {
    return BadLine(file, number,
                   "version " + std::to_string(version) + " of kiln.stats; this kiln reads " +
                       std::to_string(kStatsVersion) +
                       (version > kStatsVersion ? " (a newer kiln wrote it)" : ""));
  }
  Line l;
  l.number = number;
  KILN_ASSIGN_OR_RETURN(uint64_t rank, Unsigned(j, "rank", "", file, number));
  KILN_ASSIGN_OR_RETURN(uint64_t world, Unsigned(j, "world_size", "", file, number));
  KILN_ASSIGN_OR_RETURN(uint64_t threads, Unsigned(j, "threads", "", file, number));
  if (rank >= (uint64_t{1} << 31) || world >= (uint64_t{1} << 31) || threads >= (1u << 20)) {
    return BadLine(file, number, "rank, world_size or threads out of range");
  }
  l.rank = static_cast<uint32_t>(rank);
  l.world_size = static_cast<uint32_t>(world);
  l.threads = static_cast<uint32_t>(threads);
  KILN_ASSIGN_OR_RETURN(l.start_unix_ns, Unsigned(j, "start_unix_ns", "", file, number));
  KILN_ASSIGN_OR_RETURN(l.time_unix_ns, Unsigned(j, "time_unix_ns", "", file, number));
  KILN_ASSIGN_OR_RETURN(l.elapsed_ns, Unsigned(j, "elapsed_ns", "", file, number));
  KILN_ASSIGN_OR_RETURN(l.interval_ns, Unsigned(j, "interval_ns", "", file, number));
  if (l.interval_ns == 0) return BadLine(file, number, "interval_ns is 0");
  KILN_ASSIGN_OR_RETURN(l.io_path, Text(j, "io_path", file, number));
  if (auto h = j.find("host"); h != j.end() && h->is_string()) l.host = h->get<std::string>();
  if (auto f = j.find("final"); f != j.end() && f->is_boolean()) l.final = f->get<bool>();
  if (auto s = j.find("shuffle"); s != j.end() && s->is_string()) {
    l.shuffle = s->get<std::string>();
  }
  auto counters = j.find("counters");
  if (counters == j.end() || !counters->is_object()) {
    return BadLine(file, number, "field counters is missing or not an object");
  }
  for (const CounterField& f : kCounterFields) {
    KILN_ASSIGN_OR_RETURN(l.c.*f.member, Unsigned(*counters, f.name, "counters.", file, number));
  }
  return l;
}

// Reads one file's lines. A last line without its newline that does not parse is skipped with a
// warning: the writer appends, and may be writing it now.
Result<std::vector<Line>> ReadFile(const std::string& path, size_t file_index,
                                   std::vector<std::string>* warnings) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read error");
  const std::string text = ss.str();
  std::vector<Line> lines;
  uint64_t number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool terminated = end != std::string::npos;
    if (!terminated) end = text.size();
    const std::string_view s(text.data() + pos, end - pos);
    pos = end + 1;
    ++number;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // blank line
    json j = json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      if (!terminated) {
        warnings->push_back(Where(path, number) +
                            "incomplete last line (no newline, not JSON) skipped: the writer may "
                            "still be writing it");
        break;
      }
      return BadLine(path, number, "not JSON");
    }
    KILN_ASSIGN_OR_RETURN(Line l, ParseLine(j, path, number));
    l.file = file_index;
    lines.push_back(std::move(l));
  }
  if (lines.size() < 2) {
    return Status::Corruption(path + ": " + std::to_string(lines.size()) +
                              (lines.size() == 1 ? " line" : " lines") +
                              " of stats; at least 2 are needed for one interval");
  }
  return lines;
}

// The stage times of the deltas from `a` to `b`, consecutive lines of one run.
RankInterval Delta(const Line& a, const Line& b) {
  RankInterval r;
  r.rank = b.rank;
  r.host = b.host;
  const Counters& x = a.c;
  const Counters& y = b.c;
  auto d = [](uint64_t from, uint64_t to) { return static_cast<double>(to - from); };
  StageTimes& t = r.stages;
  t.source = StageSource::kStats;
  t.seconds = d(a.elapsed_ns, b.elapsed_ns) / 1e9;
  t.consumer_wait_seconds = d(x.consumer_wait_ns, y.consumer_wait_ns) / 1e9;
  t.slot_wait_seconds = d(x.slot_wait_ns, y.slot_wait_ns) / 1e9;
  t.fetch_seconds = d(x.fetch_ns, y.fetch_ns) / 1e9;
  t.fetch_cpu_seconds = d(x.fetch_cpu_ns, y.fetch_cpu_ns) / 1e9;
  t.decompress_seconds = d(x.decompress_ns, y.decompress_ns) / 1e9;
  t.augment_seconds = d(x.augment_ns, y.augment_ns) / 1e9;
  t.upload_seconds = d(x.upload_wait_ns, y.upload_wait_ns) / 1e9;
  t.batches = y.batches - x.batches;
  t.bytes = y.bytes - x.bytes;
  t.zstd_records = y.zstd_records - x.zstd_records;
  t.threads = b.threads;
  t.io = b.io_path;
  t.shuffle = b.shuffle;
  // Read-ahead is on when the run has advised or probed anything so far.
  t.read_ahead_window_bytes = y.read_ahead_bytes > 0 || y.residency_probes > 0 ? 1 : 0;
  t.direct_reads = y.direct_reads - x.direct_reads;
  t.residency_probes = y.residency_probes - x.residency_probes;
  t.residency_misses = y.residency_misses - x.residency_misses;
  t.remote_requests = y.requests - x.requests;
  t.remote_retries = y.request_retries - x.request_retries;
  t.remote_p50_ms = y.request_latency_p50_ns / 1e6;
  t.remote_p99_ms = y.request_latency_p99_ns / 1e6;
  r.samples = y.samples - x.samples;
  r.final = b.final;
  return r;
}

// Adds `d` into `into` (same rank); the setting (io, threads, latency quantiles) is the later's.
void Add(RankInterval* into, const RankInterval& d) {
  StageTimes& t = into->stages;
  const StageTimes& s = d.stages;
  t.source = s.source;
  t.seconds += s.seconds;
  t.consumer_wait_seconds += s.consumer_wait_seconds;
  t.slot_wait_seconds += s.slot_wait_seconds;
  t.fetch_seconds += s.fetch_seconds;
  t.fetch_cpu_seconds += s.fetch_cpu_seconds;
  t.decompress_seconds += s.decompress_seconds;
  t.augment_seconds += s.augment_seconds;
  t.upload_seconds += s.upload_seconds;
  t.batches += s.batches;
  t.bytes += s.bytes;
  t.zstd_records += s.zstd_records;
  t.direct_reads += s.direct_reads;
  t.residency_probes += s.residency_probes;
  t.residency_misses += s.residency_misses;
  t.remote_requests += s.remote_requests;
  t.remote_retries += s.remote_retries;
  t.threads = s.threads;
  t.io = s.io;
  t.shuffle = s.shuffle;
  t.read_ahead_window_bytes = s.read_ahead_window_bytes;
  t.remote_p50_ms = s.remote_p50_ms;
  t.remote_p99_ms = s.remote_p99_ms;
  into->samples += d.samples;
  into->final = d.final;
  if (!d.host.empty()) into->host = d.host;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Pct(double share) { return Fixed(100.0 * share, 0) + "%"; }

// Fills the derived figures and the verdict of a summed interval.
void Finish(RankInterval* r) {
  StageTimes& t = r->stages;
  t.consumer_wait_seconds = std::min(t.consumer_wait_seconds, t.seconds);
  t.storage_wait_seconds = std::max(0.0, t.fetch_seconds - t.fetch_cpu_seconds);
  t.copy_seconds = std::max(0.0, t.fetch_seconds - t.decompress_seconds - t.augment_seconds);
  t.mb_per_s = t.seconds > 0 ? t.bytes / 1e6 / t.seconds : 0;
  r->seconds = t.seconds;
  r->samples_per_s = t.seconds > 0 ? r->samples / t.seconds : 0;
  r->wait_share = t.seconds > 0 ? t.consumer_wait_seconds / t.seconds : 0;
  // Idle: nothing delivered, and the fetch threads stood with the slots full or the loader
  // closed. Nothing delivered while they worked (or while nothing was counted at all) is a
  // stall: a wait that has not ended.
  r->idle = r->samples == 0 && r->wait_share < 0.5 &&
            (r->final || t.slot_wait_seconds >= 0.5 * t.threads * t.seconds);
  if (r->samples == 0 && !r->idle) {
    r->bottleneck = {"stalled",
                     "bottleneck: stalled. No batch was delivered in this interval while the "
                     "fetch threads were not waiting for free slots: the training loop is in a "
                     "wait for data that has not ended (a wait is counted when it ends, so its "
                     "wait share reads " +
                         Pct(r->wait_share) +
                         " here); the interval in which it ends says what it waited for"};
    return;
  }
  r->bottleneck = DiagnoseStages(t);
}

// Slower: not idle, fewer samples/s; ties: the higher wait share, then the lower rank.
bool Slower(const RankInterval& a, const RankInterval& b) {
  if (a.idle != b.idle) return b.idle;
  if (a.samples_per_s != b.samples_per_s) return a.samples_per_s < b.samples_per_s;
  if (a.wait_share != b.wait_share) return a.wait_share > b.wait_share;
  return a.rank < b.rank;
}

std::string UtcTime(uint64_t unix_ns) {
  const std::time_t s = static_cast<std::time_t>(unix_ns / 1000000000u);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Figures in the JSON, to a millionth: enough for any use, and no 17-digit noise.
double Round6(double v) { return std::round(v * 1e6) / 1e6; }

json RankJson(const RankInterval& r) {
  const StageTimes& t = r.stages;
  return {{"rank", r.rank},
          {"host", r.host},
          {"seconds", Round6(r.seconds)},
          {"samples", r.samples},
          {"samples_per_s", Round6(r.samples_per_s)},
          {"wait_share", Round6(r.wait_share)},
          {"idle", r.idle},
          {"bottleneck", r.bottleneck.name},
          {"verdict", r.bottleneck.verdict},
          {"stages",
           {{"consumer_wait_seconds", Round6(t.consumer_wait_seconds)},
            {"fetch_seconds", Round6(t.fetch_seconds)},
            {"fetch_cpu_seconds", Round6(t.fetch_cpu_seconds)},
            {"storage_wait_seconds", Round6(t.storage_wait_seconds)},
            {"decompress_seconds", Round6(t.decompress_seconds)},
            {"augment_seconds", Round6(t.augment_seconds)},
            {"copy_seconds", Round6(t.copy_seconds)},
            {"slot_wait_seconds", Round6(t.slot_wait_seconds)},
            {"upload_wait_seconds", Round6(t.upload_seconds)},
            {"mb_per_s", Round6(t.mb_per_s)}}}};
}

}  // namespace

Result<std::vector<std::string>> ExpandStatsPaths(const std::vector<std::string>& args) {
  static const std::regex kName(R"(kiln-stats-rank([0-9]+)\.jsonl)");
  std::vector<std::string> files;
  for (const std::string& arg : args) {
    std::error_code ec;
    const fs::file_status st = fs::status(arg, ec);
    if (ec || !fs::exists(st)) return Status::NotFound(arg + ": no such file or directory");
    if (!fs::is_directory(st)) {
      files.push_back(arg);
      continue;
    }
    std::vector<std::pair<uint64_t, std::string>> found;
    for (const fs::directory_entry& e : fs::directory_iterator(arg, ec)) {
      std::smatch m;
      const std::string name = e.path().filename().string();
      if (std::regex_match(name, m, kName) && m[1].length() < 10) {
        found.emplace_back(std::stoull(m[1].str()), e.path().string());
      }
    }
    if (ec) return Status::IOError(arg + ": cannot list the directory");
    if (found.empty()) {
      return Status::NotFound(arg + ": no kiln-stats-rank*.jsonl files in the directory");
    }
    std::sort(found.begin(), found.end());
    for (auto& [rank, path] : found) files.push_back(std::move(path));
  }
  return files;
}

Result<StatsReport> ReadStatsReport(const std::vector<std::string>& files) {
  if (files.empty()) return Status::InvalidArgument("no stats files given");
  StatsReport report;
  report.files = files;
  // Runs: (rank, start_unix_ns) -> its lines in file order, and the file they came from.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<Line>> runs;
  for (size_t f = 0; f < files.size(); ++f) {
    KILN_ASSIGN_OR_RETURN(std::vector<Line> lines, ReadFile(files[f], f, &report.warnings));
    for (Line& l : lines) {
      std::vector<Line>& run = runs[{l.rank, l.start_unix_ns}];
      if (!run.empty() && run.front().file != f) {
        return BadLine(files[f], l.number,
                       "rank " + std::to_string(l.rank) + "'s run started at " +
                           std::to_string(l.start_unix_ns) + " is also in " +
                           files[run.front().file] + " (line " +
                           std::to_string(run.front().number) + "): one file per rank");
      }
      report.world_size = std::max(report.world_size, l.world_size);
      report.interval_ns = std::max(report.interval_ns, l.interval_ns);
      run.push_back(std::move(l));
    }
  }
  report.runs = static_cast<uint32_t>(runs.size());
  // Checks, and the start: the earliest first line of a run.
  report.start_unix_ns = UINT64_MAX;
  for (const auto& [key, lines] : runs) {
    report.start_unix_ns = std::min(report.start_unix_ns, lines.front().time_unix_ns);
    for (size_t i = 1; i < lines.size(); ++i) {
      const Line& a = lines[i - 1];
      const Line& b = lines[i];
      const std::string& file = files[b.file];
      const std::string run = " within one run (rank " + std::to_string(b.rank) +
                              ", start_unix_ns " + std::to_string(b.start_unix_ns) + ")";
      if (b.elapsed_ns <= a.elapsed_ns) {
        return BadLine(file, b.number,
                       "elapsed_ns went from " + std::to_string(a.elapsed_ns) + " (line " +
                           std::to_string(a.number) + ") to " + std::to_string(b.elapsed_ns) + run +
                           ": it must grow");
      }
      for (const CounterField& c : kCounterFields) {
        if (c.monotonic && b.c.*c.member < a.c.*c.member) {
          return BadLine(file, b.number,
                         std::string("counters.") + c.name + " went backwards from " +
                             std::to_string(a.c.*c.member) + " (line " + std::to_string(a.number) +
                             ") to " + std::to_string(b.c.*c.member) + run);
        }
      }
    }
  }
  // Deltas into buckets; totals per rank.
  const double interval = static_cast<double>(report.interval_ns);
  std::map<uint64_t, std::map<uint32_t, RankInterval>> buckets;
  std::map<uint32_t, RankSummary> totals;
  for (const auto& [key, lines] : runs) {
    RankSummary& summary = totals[key.first];
    summary.total.rank = key.first;
    ++summary.runs;
    for (size_t i = 1; i < lines.size(); ++i) {
      const RankInterval d = Delta(lines[i - 1], lines[i]);
      const double mid = (static_cast<double>(lines[i - 1].time_unix_ns - report.start_unix_ns) +
                          static_cast<double>(lines[i].time_unix_ns - report.start_unix_ns)) /
                         2;
      const uint64_t bucket = mid > 0 ? static_cast<uint64_t>(std::floor(mid / interval)) : 0;
      RankInterval& slot = buckets[bucket][key.first];
      slot.rank = key.first;
      Add(&slot, d);
      Add(&summary.total, d);
    }
  }
  if (buckets.empty()) return Status::Corruption("no interval in the stats files");
  for (auto& [bucket, ranks] : buckets) {
    StatsInterval iv;
    iv.bucket = bucket;
    iv.start_s = bucket * interval / 1e9;
    iv.end_s = (bucket + 1) * interval / 1e9;
    for (auto& [rank, r] : ranks) {
      Finish(&r);
      iv.ranks.push_back(std::move(r));
    }
    size_t slowest = 0;
    for (size_t i = 1; i < iv.ranks.size(); ++i) {
      if (Slower(iv.ranks[i], iv.ranks[slowest])) slowest = i;
    }
    if (!iv.ranks[slowest].idle) {
      iv.slowest = slowest;
      ++totals[iv.ranks[slowest].rank].slowest_in;
    }
    for (const RankInterval& r : iv.ranks) ++totals[r.rank].intervals;
    report.intervals.push_back(std::move(iv));
  }
  for (auto& [rank, s] : totals) {
    Finish(&s.total);
    report.ranks.push_back(std::move(s));
  }
  for (size_t i = 1; i < report.ranks.size(); ++i) {
    if (Slower(report.ranks[i].total, report.ranks[report.worst].total)) report.worst = i;
  }
  return report;
}

std::string StatsReportText(const StatsReport& report) {
  std::string out;
  std::vector<uint32_t> ranks;
  for (const RankSummary& s : report.ranks) ranks.push_back(s.total.rank);
  out += "kiln stats: " + std::to_string(ranks.size()) + " ranks (world size " +
         std::to_string(report.world_size) + "), " + std::to_string(report.files.size()) +
         (report.files.size() == 1 ? " file, " : " files, ") + std::to_string(report.runs) +
         (report.runs == 1 ? " loader run" : " loader runs") + "; intervals of " +
         Fixed(report.interval_ns / 1e9, 1) + " s from " + UtcTime(report.start_unix_ns) + "\n";
  for (const std::string& w : report.warnings) out += "warning: " + w + "\n";
  for (const StatsInterval& iv : report.intervals) {
    std::vector<double> rates;  // of the ranks reading
    for (const RankInterval& r : iv.ranks) {
      if (!r.idle) rates.push_back(r.samples_per_s);
    }
    out += "\ninterval " + std::to_string(iv.bucket) + " (" + Fixed(iv.start_s, 1) + "-" +
           Fixed(iv.end_s, 1) + " s): ";
    if (iv.slowest) {
      const RankInterval& slow = iv.ranks[*iv.slowest];
      out += "slowest rank " + std::to_string(slow.rank) + ", " + Fixed(slow.samples_per_s, 1) +
             " samples/s (median " + Fixed(Median(rates), 1) + "), limit: " + slow.bottleneck.name;
    } else {
      out += "no rank asked for data (all idle)";
    }
    out += "\n  wait share:";
    size_t k = 0;
    for (uint32_t rank : ranks) {
      out += " r" + std::to_string(rank) + " ";
      if (k < iv.ranks.size() && iv.ranks[k].rank == rank) {
        const RankInterval& r = iv.ranks[k++];
        out += r.idle ? "idle" : Pct(r.wait_share);
      } else {
        out += "-";
      }
    }
    out += "\n";
    if (iv.slowest) {
      const RankInterval& slow = iv.ranks[*iv.slowest];
      out += "  rank " + std::to_string(slow.rank) + ": " + slow.bottleneck.verdict + "\n";
    }
  }
  const RankInterval& worst = report.ranks[report.worst].total;
  std::vector<double> rates;
  for (const RankSummary& s : report.ranks) rates.push_back(s.total.samples_per_s);
  out += "\nsummary over " + std::to_string(report.intervals.size()) + " intervals: worst rank " +
         std::to_string(worst.rank) + ", " + Fixed(worst.samples_per_s, 1) +
         " samples/s (median of ranks " + Fixed(Median(rates), 1) + "), waited " +
         Pct(worst.wait_share) + " of the time, slowest in " +
         std::to_string(report.ranks[report.worst].slowest_in) + " of " +
         std::to_string(report.intervals.size()) + " intervals\n";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "  %6s %12s %6s %9s  %s\n", "rank", "samples/s", "wait",
                "slowest", "limit");
  out += buf;
  for (const RankSummary& s : report.ranks) {
    const std::string slowest = std::to_string(s.slowest_in) + "/" + std::to_string(s.intervals);
    std::snprintf(buf, sizeof(buf), "  %6u %12.1f %6s %9s  %s\n", s.total.rank,
                  s.total.samples_per_s, Pct(s.total.wait_share).c_str(), slowest.c_str(),
                  s.total.bottleneck.name.c_str());
    out += buf;
  }
  out += "  rank " + std::to_string(worst.rank) + ": " + worst.bottleneck.verdict + "\n";
  return out;
}

std::string StatsReportJson(const StatsReport& report) {
  json intervals = json::array();
  for (const StatsInterval& iv : report.intervals) {
    json ranks = json::array();
    for (const RankInterval& r : iv.ranks) ranks.push_back(RankJson(r));
    intervals.push_back({{"bucket", iv.bucket},
                         {"start_s", iv.start_s},
                         {"end_s", iv.end_s},
                         {"slowest_rank", iv.slowest ? json(iv.ranks[*iv.slowest].rank) : json()},
                         {"ranks", std::move(ranks)}});
  }
  json ranks = json::array();
  for (const RankSummary& s : report.ranks) {
    json r = RankJson(s.total);
    r["intervals"] = s.intervals;
    r["slowest_in"] = s.slowest_in;
    r["runs"] = s.runs;
    ranks.push_back(std::move(r));
  }
  json j = {{"ok", true},
            {"schema", kStatsSchema},
            {"version", kStatsVersion},
            {"files", report.files},
            {"world_size", report.world_size},
            {"interval_s", report.interval_ns / 1e9},
            {"start_unix_ns", report.start_unix_ns},
            {"runs", report.runs},
            {"intervals", std::move(intervals)},
            {"summary",
             {{"worst_rank", report.ranks[report.worst].total.rank}, {"ranks", std::move(ranks)}}},
            {"warnings", report.warnings}};
  return j.dump();
}

}  // namespace kiln
