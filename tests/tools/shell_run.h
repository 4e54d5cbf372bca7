// Runs a shell command the way a user runs `kiln` from a terminal, for the CLI tests
// (tests/tools/kiln_cli_test.cc, kiln_cli_conventions_test.cc, kiln_cli_messages_test.cc).
// Thread safety: none needed; call them on the test's thread.
#ifndef KILN_TESTS_TOOLS_SHELL_RUN_H_
#define KILN_TESTS_TOOLS_SHELL_RUN_H_

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tests/test_util.h"

namespace kiln::testing {

struct ShellRun {
  int exit_code = -1;  // -1 when the shell could not start or the command died of a signal
  std::string out;     // stdout
  std::string err;     // stderr (RunShellCapturingStderr only)
};

// Runs `command` through /bin/sh with stdout read through a pipe; stderr goes where `command`
// sends it ("2>&1", "2>/dev/null", or the test's own stderr).
inline ShellRun RunShell(const std::string& command) {
  ShellRun r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// RunShell with stderr captured apart from stdout, in `err` (through a temporary file).
inline ShellRun RunShellCapturingStderr(const std::string& command) {
  std::string err_path = ::testing::TempDir() + "kiln_stderr_XXXXXX";
  const int fd = ::mkstemp(err_path.data());
  if (fd < 0) return {};
  ::close(fd);
  ShellRun r = RunShell(command + " 2>" + err_path);
  r.err = ReadFileString(err_path);
  ::unlink(err_path.c_str());
  return r;
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_TOOLS_SHELL_RUN_H_
