// The `kiln` command line: declares the subcommands (tools/cli_commands.h), parses with CLI11 and
// runs the one that was given. Exit codes: 0 success, 1 the data has problems, 2 usage error,
// 130 interrupted.
#include <CLI/CLI.hpp>
#include <vector>

#include "formats/version.h"
#include "tools/cli_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: pack image folders into ready-to-train tensors, verify them, read them fast"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kiln::kToolVersionString);
  const std::vector<kiln::Subcommand> commands = {
      kiln::AddPackCommand(app), kiln::AddVerifyCommand(app), kiln::AddInspectCommand(app),
      kiln::AddShowCommand(app), kiln::AddBenchCommand(app),  kiln::AddMergeCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a usage error (exit 2).
    const int code = app.exit(e);
    return code == 0 ? kiln::kExitOk : kiln::kExitUsage;
  }
  for (const kiln::Subcommand& c : commands) {
    if (c.command->parsed()) return c.run();
  }
  return kiln::kExitUsage;
}
