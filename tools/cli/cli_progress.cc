#include "tools/cli/cli_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln {
namespace {

bool StderrIsTerminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) != 0 && !(term && std::strcmp(term, "dumb") == 0);
}

bool ColorWanted() {
  const char* no_color = std::getenv("NO_COLOR");
  return no_color == nullptr || no_color[0] == '\0';
}

// "0:05", "1:02:03".
std::string Clock(double seconds) {
  const uint64_t s = seconds > 0 ? static_cast<uint64_t>(seconds + 0.5) : 0;
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%llu:%02llu:%02llu", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu:%02llu", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  }
  return buf;
}

}  // namespace

ProgressPrinter::ProgressPrinter(std::string command, std::string unit)
    : command_(std::move(command)),
      unit_(std::move(unit)),
      tty_(StderrIsTerminal()),
      color_(tty_ && ColorWanted()) {}

ProgressPrinter::~ProgressPrinter() {
  if (line_open_) std::fputc('\n', stderr);
}

std::string ProgressPrinter::Describe(uint64_t done, uint64_t total, double seconds,
                                      const std::string& unit) {
  const double rate = seconds > 0 ? done / seconds : 0;
  std::string text = std::to_string(done) + (total ? "/" + std::to_string(total) : "") + " " + unit;
  if (total) text += " (" + std::to_string(done * 100 / total) + "%)";
  char buf[64];
  std::snprintf(buf, sizeof(buf), ", %.0f %s/s", rate, unit.c_str());
  text += buf;
  if (total && done < total && rate > 0) text += ", ETA " + Clock((total - done) / rate);
  return text;
}

void ProgressPrinter::Update(uint64_t done, uint64_t total) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) {
    // Redraw at most 10 times a second, and always at the end.
    if ((total == 0 || done < total) && last_draw_s_ >= 0 && seconds - last_draw_s_ < 0.1) return;
    last_draw_s_ = seconds;
    Draw(done, total, seconds);
    return;
  }
  if (total == 0) return;  // no tenths of an unknown total: the command's report says the count
  const uint64_t tenth = std::min<uint64_t>(done * 10 / total, 10);
  if (tenth > last_tenth_) {
    last_tenth_ = tenth;
    std::fprintf(stderr, "%s: %s\n", command_.c_str(),
                 Describe(done, total, seconds, unit_).c_str());
  }
}

void ProgressPrinter::Draw(uint64_t done, uint64_t total, double seconds) {
  const int width = 30;
  std::string bar;
  if (total) {
    const int filled = static_cast<int>(width * std::min(done, total) / total);
    bar = std::string("[") + (color_ ? "\033[32m" : "") + std::string(filled, '#') +
          (color_ ? "\033[0m" : "") + std::string(width - filled, '.') + "] ";
  }
  // "\r" and trailing blanks overwrite a longer previous line without terminal escapes.
  std::fprintf(stderr, "\r%s%s   ", bar.c_str(), Describe(done, total, seconds, unit_).c_str());
  line_open_ = true;
  if (total && done >= total) {
    std::fputc('\n', stderr);
    line_open_ = false;
  }
  std::fflush(stderr);
}

}  // namespace kiln
