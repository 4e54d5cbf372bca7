// `kiln stats` and its reader (tools/bench/stats_report.h) on the fixture export of four ranks
// whose rank 2 is storage-bound (tests/tools/fixtures/stats/make_fixtures.py): rank 2 is named
// the slowest in every interval and overall, with kiln bench's storage verdict; the text and
// --json forms equal the golden files; damaged files are refused naming the file and line; the
// --png picture shows rank 2's line above the others (and, for many ranks, its heatmap row
// brighter).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "tests/tools/shell_run.h"
#include "tools/bench/stats_report.h"
#include "tools/imaging/wait_plot.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::kiln::testing::ReadFileString;
using ::kiln::testing::RunShellCapturingStderr;
using ::kiln::testing::ShellRun;
using ::kiln::testing::WriteFileString;

const std::string kFixtures = std::string(KILN_SOURCE_DIR) + "/tests/tools/fixtures/stats";
const std::string kFourRanks = kFixtures + "/four_ranks";
const std::string kKiln = std::string(KILN_BINARY_DIR) + "/tools/kiln";

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// CTest runs each test in its own process, two at a time: scratch paths carry the process id.
std::string Fresh(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "kiln_stats_test_" + std::to_string(::getpid()) + "_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<std::string> FixtureLines(uint32_t rank) {
  const std::string text =
      ReadFileString(kFourRanks + "/kiln-stats-rank" + std::to_string(rank) + ".jsonl");
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find('\n', pos);
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

TEST(StatsReportTest, NamesTheStorageBoundRankSlowestWithTheBenchVerdict) {
  Result<std::vector<std::string>> files = ExpandStatsPaths({kFourRanks});
  ASSERT_TRUE(files.ok()) << files.status().message();
  ASSERT_EQ(files->size(), 4u);
  EXPECT_EQ(fs::path((*files)[2]).filename(), "kiln-stats-rank2.jsonl");
  Result<StatsReport> report = ReadStatsReport(*files);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->world_size, 4u);
  EXPECT_EQ(report->interval_ns, 10'000'000'000u);
  ASSERT_EQ(report->intervals.size(), 4u);
  for (const StatsInterval& iv : report->intervals) {
    ASSERT_EQ(iv.ranks.size(), 4u) << iv.bucket;  // the ranks' phases are aligned on buckets
    ASSERT_TRUE(iv.slowest.has_value()) << iv.bucket;
    const RankInterval& slow = iv.ranks[*iv.slowest];
    EXPECT_EQ(slow.rank, 2u) << iv.bucket;
    EXPECT_EQ(slow.bottleneck.name, "storage") << slow.bottleneck.verdict;
    EXPECT_EQ(slow.bottleneck.verdict.rfind("bottleneck: storage.", 0), 0u);
    EXPECT_GT(slow.wait_share, 0.6);
    EXPECT_NEAR(slow.samples_per_s, 1000, 70);
    for (const RankInterval& r : iv.ranks) {
      if (r.rank == 2) continue;
      EXPECT_LT(r.wait_share, 0.1) << r.rank;
      EXPECT_EQ(r.bottleneck.name, "consumer") << r.bottleneck.verdict;
    }
  }
  ASSERT_EQ(report->ranks.size(), 4u);
  const RankSummary& worst = report->ranks[report->worst];
  EXPECT_EQ(worst.total.rank, 2u);
  EXPECT_EQ(worst.slowest_in, 4u);
  EXPECT_EQ(worst.total.bottleneck.name, "storage");
  EXPECT_TRUE(Contains(worst.total.bottleneck.verdict, "32960 of 41200 upcoming samples"))
      << worst.total.bottleneck.verdict;
  // Summed over the whole export: four 10 s intervals (plus 3 ms) of rank 2.
  EXPECT_NEAR(worst.total.seconds, 40.003, 1e-9);
  EXPECT_EQ(worst.total.samples, 10000u + 10200 + 10400 + 10600);
}

// The verdict is kiln bench's function: the same stage times give the same bottleneck.
TEST(StatsReportTest, StageTimesOfAnIntervalGetKilnBenchsVerdict) {
  Result<StatsReport> report = ReadStatsReport(*ExpandStatsPaths({kFourRanks}));
  ASSERT_TRUE(report.ok()) << report.status().message();
  const RankInterval& r = report->intervals[0].ranks[2];
  const Bottleneck again = DiagnoseStages(r.stages);
  EXPECT_EQ(again.name, r.bottleneck.name);
  EXPECT_EQ(again.verdict, r.bottleneck.verdict);
  EXPECT_EQ(r.stages.source, StageSource::kStats);
  EXPECT_NEAR(r.stages.storage_wait_seconds, 15.0, 1e-9);  // fetch 19.5 - cpu 4.5
  EXPECT_NEAR(r.stages.copy_seconds, 17.5, 1e-9);          // fetch - decompress - augment
}

// kiln bench of a dataset at a URL (io "remote"): its files are never resident (a "cold cache"
// of 0%) and it takes no page faults, so the storage verdict names the range GETs, their
// retries and latency, not page faults, and does not send the user to fio on local files.
TEST(BottleneckTest, ABenchOfAUrlNamesTheRangeGetsNotPageFaultsOrFio) {
  StageTimes t;
  t.source = StageSource::kBench;
  t.io = "remote";
  t.cache = "cold";
  t.resident_fraction = 0;
  t.seconds = 10;
  t.consumer_wait_seconds = 9.9;
  t.first_batch_wait_seconds = 0.1;
  t.fetch_seconds = 19;
  t.fetch_cpu_seconds = 4;
  t.storage_wait_seconds = 15;
  t.copy_seconds = 19;
  t.cpu_seconds = 4;
  t.threads = 2;
  t.shuffle = "exact";
  t.remote_requests = 58918;
  t.remote_retries = 3;
  t.remote_p50_ms = 8.2;
  t.remote_p99_ms = 23.2;
  const Bottleneck b = DiagnoseStages(t);
  EXPECT_EQ(b.name, "storage") << b.verdict;
  EXPECT_TRUE(Contains(b.verdict, "58918 range GETs (3 retries; latency p50 8.2 ms, p99 23.2 ms"))
      << b.verdict;
  EXPECT_FALSE(Contains(b.verdict, "page faults")) << b.verdict;
  EXPECT_FALSE(Contains(b.verdict, "fio")) << b.verdict;
  // A warm local run keeps its advice.
  t.io = "mmap";
  t.major_faults = 1000;
  const Bottleneck local = DiagnoseStages(t);
  EXPECT_TRUE(Contains(local.verdict, "major page faults")) << local.verdict;
  EXPECT_TRUE(Contains(local.verdict, "fio")) << local.verdict;
}

// Golden output: run from the fixture directory so the file names are relative.
TEST(KilnStatsCliTest, TextAndJsonEqualTheGoldenFiles) {
  const ShellRun text = RunShellCapturingStderr("cd " + kFourRanks + " && " + kKiln + " stats .");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, ReadFileString(kFixtures + "/four_ranks.expected.txt"));
  const ShellRun j =
      RunShellCapturingStderr("cd " + kFourRanks + " && " + kKiln + " stats --json .");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(j.out, ReadFileString(kFixtures + "/four_ranks.expected.json"));
  const json parsed = json::parse(j.out);
  EXPECT_EQ(parsed.at("summary").at("worst_rank"), 2);
  for (const json& iv : parsed.at("intervals")) EXPECT_EQ(iv.at("slowest_rank"), 2);
  // Files and directories name the same export.
  const ShellRun files = RunShellCapturingStderr(
      "cd " + kFourRanks + " && " + kKiln +
      " stats --json ./kiln-stats-rank0.jsonl ./kiln-stats-rank1.jsonl ./kiln-stats-rank2.jsonl "
      "./kiln-stats-rank3.jsonl");
  EXPECT_EQ(files.out, j.out);
}

struct BadCase {
  std::string name;
  int line;            // the damaged line, 1-based
  std::string edit;    // what to do to it
  std::string expect;  // in the message, after "FILE:LINE: "
};

// Each damage in rank 1's file is refused with exit 1, naming the file and line.
TEST(KilnStatsCliTest, DamagedFilesAreRefusedNamingTheFileAndLine) {
  const std::vector<BadCase> cases = {
      {"not_json", 3, "truncate", "not JSON"},
      {"schema", 1, "schema", "schema is \"other.stats\", not \"kiln.stats\""},
      {"version", 2, "version", "version 2 of kiln.stats; this kiln reads 1"},
      {"backwards", 4, "backwards", "counters.samples went backwards from"},
      {"elapsed", 3, "elapsed", "elapsed_ns went from"},
      {"missing", 5, "missing", "field counters.fetch_cpu_ns is missing"},
      {"type", 2, "type", "field rank is not an unsigned integer: \"1\""},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = Fresh(c.name);
    for (uint32_t r = 0; r < 4; ++r) {
      std::vector<std::string> lines = FixtureLines(r);
      if (r == 1) {
        std::string& l = lines[c.line - 1];
        json j = json::parse(l);
        if (c.edit == "truncate") {
          l = l.substr(0, l.size() / 2);
        } else if (c.edit == "schema") {
          j["schema"] = "other.stats";
        } else if (c.edit == "version") {
          j["version"] = 2;
        } else if (c.edit == "backwards") {
          j["counters"]["samples"] = 5;
        } else if (c.edit == "elapsed") {
          j["elapsed_ns"] = json::parse(lines[c.line - 2])["elapsed_ns"];
        } else if (c.edit == "missing") {
          j["counters"].erase("fetch_cpu_ns");
        } else if (c.edit == "type") {
          j["rank"] = "1";
        }
        if (c.edit != "truncate") l = j.dump();
      }
      WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", Join(lines));
    }
    const std::string file = dir + "/kiln-stats-rank1.jsonl";
    const ShellRun run = RunShellCapturingStderr(kKiln + " stats " + dir);
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_TRUE(Contains(run.err, file + ":" + std::to_string(c.line) + ": " + c.expect))
        << run.err;
    const ShellRun j = RunShellCapturingStderr(kKiln + " stats --json " + dir);
    EXPECT_EQ(j.exit_code, 1);
    const json f = json::parse(j.out);
    EXPECT_FALSE(f.at("ok").get<bool>());
    EXPECT_TRUE(Contains(f.at("error"), file + ":" + std::to_string(c.line) + ": ")) << j.out;
  }
}

TEST(KilnStatsCliTest, TooFewLinesNoFilesAndOneRunInTwoFilesAreRefused) {
  const std::string dir = Fresh("few");
  const std::vector<std::string> lines = FixtureLines(0);
  WriteFileString(dir + "/kiln-stats-rank0.jsonl", lines[0] + "\n");
  ShellRun run = RunShellCapturingStderr(kKiln + " stats " + dir + "/kiln-stats-rank0.jsonl");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(Contains(run.err, dir + "/kiln-stats-rank0.jsonl: 1 line of stats; at least 2 are "
                                      "needed for one interval"))
      << run.err;
  const std::string empty = Fresh("empty");
  run = RunShellCapturingStderr(kKiln + " stats " + empty);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(Contains(run.err, empty + ": no kiln-stats-rank*.jsonl files")) << run.err;
  run = RunShellCapturingStderr(kKiln + " stats " + empty + "/nothing.jsonl");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(Contains(run.err, "nothing.jsonl: no such file")) << run.err;
  // Rank 0's run copied into a second file.
  const std::string twice = Fresh("twice");
  WriteFileString(twice + "/kiln-stats-rank0.jsonl", Join(lines));
  WriteFileString(twice + "/kiln-stats-rank1.jsonl", Join(lines));
  run = RunShellCapturingStderr(kKiln + " stats " + twice);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(Contains(run.err, twice + "/kiln-stats-rank1.jsonl:1: rank 0's run")) << run.err;
  EXPECT_TRUE(Contains(run.err, "is also in " + twice + "/kiln-stats-rank0.jsonl")) << run.err;
  // No files at all: usage.
  EXPECT_EQ(RunShellCapturingStderr(kKiln + " stats").exit_code, 2);
}

// A line still being appended (no newline yet, not JSON) is skipped with a warning, and a
// restarted loader's second run in the same file is a run of its own: no delta across runs.
TEST(KilnStatsCliTest, APartialLastLineIsSkippedAndARestartIsANewRun) {
  const std::string dir = Fresh("live");
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> lines = FixtureLines(r);
    std::string text = Join(lines);
    if (r == 3) {
      // A restart: a new run whose counters start again from small values, 60 s later.
      for (size_t k = 0; k < 3; ++k) {
        json j = json::parse(lines[k]);
        j["start_unix_ns"] = j["start_unix_ns"].get<uint64_t>() + 60'000'000'000u;
        j["time_unix_ns"] = j["time_unix_ns"].get<uint64_t>() + 60'000'000'000u;
        text += j.dump() + "\n";
      }
      text += lines[1].substr(0, 40);  // being written
    }
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", text);
  }
  const ShellRun run = RunShellCapturingStderr(kKiln + " stats --json " + dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json j = json::parse(run.out);
  EXPECT_EQ(j.at("runs"), 5);
  ASSERT_EQ(j.at("warnings").size(), 1u);
  EXPECT_TRUE(Contains(j.at("warnings")[0], "kiln-stats-rank3.jsonl:9: incomplete last line"))
      << j.at("warnings");
  const json& rank3 = j.at("summary").at("ranks")[3];
  EXPECT_EQ(rank3.at("runs"), 2);
  EXPECT_EQ(rank3.at("intervals"), 6);  // 4 in the first run, 2 in the second
  EXPECT_EQ(j.at("summary").at("worst_rank"), 2);
}

// A training loop that stops asking for data (the end, evaluation) delivers no samples and does
// not wait: idle, never the slowest, even at 0 samples/s. The counter of a wait is added when it
// ends, so an interval can hold more wait than wall time: the share is capped at 100%.
TEST(KilnStatsCliTest, IdleRanksAreNeverTheSlowestAndWaitSharesStopAt100Percent) {
  const std::string dir = Fresh("idle");
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> lines = FixtureLines(r);
    json prev = json::parse(lines[3]), last = json::parse(lines[4]), tail = last;
    tail["time_unix_ns"] = last["time_unix_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["elapsed_ns"] = last["elapsed_ns"].get<uint64_t>() + 10'000'000'000u;
    if (r == 2 || r == 3) {
      // Ranks 2 and 3 read on, at their last interval's rate; rank 3's loop waits 12 s in 10.
      for (auto& [name, value] : tail["counters"].items()) {
        if (name.find("latency") != std::string::npos) continue;
        value = value.get<uint64_t>() +
                (value.get<uint64_t>() - prev["counters"][name].get<uint64_t>());
      }
      if (r == 3) {
        tail["counters"]["consumer_wait_ns"] =
            last["counters"]["consumer_wait_ns"].get<uint64_t>() + 12'000'000'000u;
      }
    }
    if (r < 2) {
      // The loop stopped taking batches: both fetch threads wait for free slots all along.
      tail["counters"]["slot_wait_ns"] =
          last["counters"]["slot_wait_ns"].get<uint64_t>() + 20'000'000'000u;
    }
    lines.push_back(tail.dump());
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", Join(lines));
  }
  Result<StatsReport> report = ReadStatsReport(*ExpandStatsPaths({dir}));
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->intervals.size(), 5u);
  const StatsInterval& iv = report->intervals[4];
  ASSERT_EQ(iv.ranks.size(), 4u);
  EXPECT_TRUE(iv.ranks[0].idle);
  EXPECT_TRUE(iv.ranks[1].idle);
  EXPECT_FALSE(iv.ranks[2].idle);
  EXPECT_EQ(iv.ranks[0].samples_per_s, 0);
  ASSERT_TRUE(iv.slowest.has_value());
  EXPECT_EQ(iv.ranks[*iv.slowest].rank, 2u);  // not rank 0 or 1 at 0 samples/s
  EXPECT_EQ(iv.ranks[3].wait_share, 1.0);
  EXPECT_TRUE(Contains(iv.ranks[3].bottleneck.verdict, "waited 100% of the time"))
      << iv.ranks[3].bottleneck.verdict;
  const std::string text = StatsReportText(*report);
  EXPECT_TRUE(Contains(text, "wait share: r0 idle r1 idle r2 ")) << text;
  // Every rank idle: no slowest rank (null in the JSON).
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> lines = FixtureLines(r);
    json tail = json::parse(lines[4]);
    tail["time_unix_ns"] = tail["time_unix_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["elapsed_ns"] = tail["elapsed_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["counters"]["slot_wait_ns"] =
        tail["counters"]["slot_wait_ns"].get<uint64_t>() + 20'000'000'000u;
    lines.push_back(tail.dump());
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", Join(lines));
  }
  report = ReadStatsReport(*ExpandStatsPaths({dir}));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_FALSE(report->intervals[4].slowest.has_value());
  EXPECT_TRUE(Contains(StatsReportText(*report), "no rank asked for data (all idle)"));
  const json j = json::parse(StatsReportJson(*report));
  EXPECT_TRUE(j.at("intervals")[4].at("slowest_rank").is_null());
  EXPECT_EQ(j.at("summary").at("worst_rank"), 2);
  // Nothing counted at all in an interval (a first batch still being waited for: the wait is
  // added when it ends) is a stall, not idle: that rank is the slowest.
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> lines = FixtureLines(r);
    json tail = json::parse(lines[4]);
    tail["time_unix_ns"] = tail["time_unix_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["elapsed_ns"] = tail["elapsed_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["final"] = false;
    if (r != 1) {
      tail["counters"]["slot_wait_ns"] =
          tail["counters"]["slot_wait_ns"].get<uint64_t>() + 20'000'000'000u;
    }
    lines.push_back(tail.dump());
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", Join(lines));
  }
  report = ReadStatsReport(*ExpandStatsPaths({dir}));
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_TRUE(report->intervals[4].slowest.has_value());
  EXPECT_EQ(report->intervals[4].ranks[*report->intervals[4].slowest].rank, 1u);
  EXPECT_FALSE(report->intervals[4].ranks[1].idle);
  EXPECT_EQ(report->intervals[4].ranks[1].bottleneck.name, "stalled");
  // The same interval as the loader's last (final: written at close) is the end: idle.
  for (uint32_t r = 0; r < 4; ++r) {
    std::vector<std::string> lines = FixtureLines(r);
    json last = json::parse(lines[4]), tail = last;
    last["final"] = false;
    lines[4] = last.dump();
    tail["time_unix_ns"] = tail["time_unix_ns"].get<uint64_t>() + 10'000'000'000u;
    tail["elapsed_ns"] = tail["elapsed_ns"].get<uint64_t>() + 10'000'000'000u;
    lines.push_back(tail.dump());
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", Join(lines));
  }
  report = ReadStatsReport(*ExpandStatsPaths({dir}));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_FALSE(report->intervals[4].slowest.has_value());
}

// Pixels of exactly `colour` inside the plot area: their count and mean row.
struct Seen {
  int count = 0;
  double mean_y = 0;
};
Seen PixelsOf(const cv::Mat& img, const WaitPlotLayout& l, const std::array<uint8_t, 3>& colour) {
  Seen s;
  double sum = 0;
  for (int y = l.top; y < l.bottom; ++y) {
    for (int x = l.left; x < l.right; ++x) {
      const cv::Vec3b p = img.at<cv::Vec3b>(y, x);
      if (p[0] == colour[0] && p[1] == colour[1] && p[2] == colour[2]) {
        ++s.count;
        sum += y;
      }
    }
  }
  s.mean_y = s.count ? sum / s.count : 0;
  return s;
}

TEST(KilnStatsCliTest, ThePictureShowsRankTwosLineAboveTheOthers) {
  const std::string png = Fresh("png") + "/wait.png";
  const ShellRun run = RunShellCapturingStderr(kKiln + " stats " + kFourRanks + " --png " + png);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(Contains(run.out, "wrote the wait share per rank to " + png)) << run.out;
  const cv::Mat img = cv::imread(png, cv::IMREAD_COLOR);
  ASSERT_FALSE(img.empty()) << png;
  WaitPlot shape;
  shape.series.assign(4, "");
  const WaitPlotLayout l = LayoutWaitPlot(shape);
  ASSERT_FALSE(l.heatmap);
  EXPECT_EQ(img.cols, l.width);
  EXPECT_EQ(img.rows, l.height);
  const Seen two = PixelsOf(img, l, WaitPlotColor(2));
  ASSERT_GT(two.count, 200);  // a line across the plot, not a dot
  int others = 0;
  for (size_t r : {0, 1, 3}) {
    const Seen s = PixelsOf(img, l, WaitPlotColor(r));
    others += s.count;
    if (s.count > 0) {
      // Rank 2 waited over 60%, the others under 10%: its line is far higher (smaller y).
      EXPECT_LT(two.mean_y + 0.5 * (l.bottom - l.top), s.mean_y) << r;
    }
  }
  EXPECT_GT(others, 200);
  // Rank 2's line at about 64% of the plot's height.
  const double share = (l.bottom - 1 - two.mean_y) / (l.bottom - l.top - 1);
  EXPECT_NEAR(share, 0.64, 0.03);
}

// 16 ranks (more than kWaitPlotMaxLines): a heatmap whose row of the storage-bound rank 5 is
// the brightest.
TEST(KilnStatsCliTest, ManyRanksMakeAHeatmapWithTheSlowRankBrighter) {
  const std::string dir = Fresh("heatmap");
  const std::vector<std::string> healthy = FixtureLines(0), slow = FixtureLines(2);
  constexpr uint32_t kRanks = 16;
  for (uint32_t r = 0; r < kRanks; ++r) {
    std::string text;
    for (const std::string& line : r == 5 ? slow : healthy) {
      json j = json::parse(line);
      j["rank"] = r;
      j["world_size"] = kRanks;
      text += j.dump() + "\n";
    }
    WriteFileString(dir + "/kiln-stats-rank" + std::to_string(r) + ".jsonl", text);
  }
  const std::string png = dir + "/heat.png";
  const ShellRun run = RunShellCapturingStderr(kKiln + " stats --json " + dir + " --png " + png);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(json::parse(run.out).at("summary").at("worst_rank"), 5);
  const cv::Mat img = cv::imread(png, cv::IMREAD_GRAYSCALE);
  ASSERT_FALSE(img.empty());
  WaitPlot shape;
  shape.series.assign(kRanks, "");
  const WaitPlotLayout l = LayoutWaitPlot(shape);
  ASSERT_TRUE(l.heatmap);
  EXPECT_EQ(img.cols, l.width);
  EXPECT_EQ(img.rows, l.height);
  std::vector<double> brightness;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const cv::Rect row(l.left, l.top + static_cast<int>(r) * l.row_height, l.right - l.left,
                       l.row_height);
    brightness.push_back(cv::mean(img(row))[0]);
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    if (r == 5) continue;
    EXPECT_GT(brightness[5], brightness[r] + 60) << r;
  }
}

}  // namespace
}  // namespace kiln
