// The cost of one statistics export tick (reader/stats_export.md): format the JSON line and the
// .prom text of a full record and write both (append + atomic rewrite) to DIR, as the
// exporter's thread does every interval. Prints the median and p90 of ROUNDS ticks, in
// microseconds of wall time and of this thread's CPU time (BENCHMARKS.md, "Statistics export").
//
//   build/bench/stats_export_cost DIR [ROUNDS]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "reader/loader_clock.h"
#include "reader/stats_export.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [ROUNDS]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 2000;
  std::filesystem::create_directories(dir);
  kiln::StatsRecord r;
  r.host = "bench-host";
  r.pid = ::getpid();
  r.threads = 2;
  r.stats.samples = 123456789;
  r.stats.fetch_ns = 987654321012;
  for (int k = 0; k < 1000; ++k) r.stats.requests.AddLatencyUs(100 + k * 37);
  const std::string jsonl = kiln::StatsJsonlPath(dir, 0), prom = kiln::StatsPromPath(dir, 0);
  const int fd = ::open(jsonl.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(jsonl.c_str());
    return 1;
  }
  std::vector<double> wall_us, cpu_us;
  for (int i = 0; i < rounds; ++i) {
    const uint64_t t0 = kiln::NowNs(), c0 = kiln::ThreadCpuNs();
    r.stats.batches = static_cast<uint64_t>(i);
    const std::string line = kiln::StatsJsonLine(r);
    const std::string text = kiln::StatsPrometheusText(r);
    bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    const std::string tmp = prom + ".tmp";
    const int pfd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ok = ok && pfd >= 0 &&
         ::write(pfd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    if (pfd >= 0) ::close(pfd);
    ok = ok && ::rename(tmp.c_str(), prom.c_str()) == 0;
    if (!ok) {
      std::perror("write");
      return 1;
    }
    wall_us.push_back((kiln::NowNs() - t0) / 1e3);
    cpu_us.push_back((kiln::ThreadCpuNs() - c0) / 1e3);
  }
  ::close(fd);
  const auto at = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * (v.size() - 1))];
  };
  std::printf(
      "stats export tick, %d rounds: wall median %.1f us (p90 %.1f), cpu median %.1f us "
      "(p90 %.1f)\n",
      rounds, at(wall_us, 0.5), at(wall_us, 0.9), at(cpu_us, 0.5), at(cpu_us, 0.9));
  return 0;
}
