// The progress display of the long-running `kiln` subcommands (pack, verify, merge), on stderr.
//
// On a terminal (stderr is a tty and TERM is not "dumb"): one line redrawn in place at most every
// 100 ms, "[#####.....] 512/1000 images  850 images/s  ETA 0:01", the bar in colour unless
// NO_COLOR is set (https://no-color.org: any non-empty value). Elsewhere (a pipe, a file, a CI
// log): a plain line at every tenth, "kiln verify: 100/1000 records (10%), 850 records/s, ETA
// 1 s", no control characters. With total 0 (unknown), counts and rates without bar or ETA.
// Thread safety: one ProgressPrinter is called from one thread at a time.
#ifndef KILN_TOOLS_CLI_CLI_PROGRESS_H_
#define KILN_TOOLS_CLI_CLI_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln {

class ProgressPrinter {
 public:
  // `command` prefixes the plain lines ("kiln pack"); `unit` names what is counted ("images").
  // The terminal and colour decisions are taken here, from stderr, TERM and NO_COLOR.
  ProgressPrinter(std::string command, std::string unit);
  // Ends a redrawn line that Update left open.
  ~ProgressPrinter();

  // Reports `done` of `total` units (total 0: unknown). Cheap when nothing is drawn.
  void Update(uint64_t done, uint64_t total);

  // Returns the line Update would show now, without control characters, e.g.
  // "512/1000 images (51%), 850 images/s, ETA 0:01"; for tests.
  static std::string Describe(uint64_t done, uint64_t total, double seconds,
                              const std::string& unit);

 private:
  void Draw(uint64_t done, uint64_t total, double seconds);

  const std::string command_;
  const std::string unit_;
  const bool tty_;
  const bool color_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_draw_s_ = -1;  // terminal: when the line was last drawn
  bool line_open_ = false;   // terminal: a line is drawn and not yet ended
  uint64_t last_tenth_ = 0;  // plain lines: the last tenth printed
};

}  // namespace kiln

#endif  // KILN_TOOLS_CLI_CLI_PROGRESS_H_
