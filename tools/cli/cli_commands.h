// The subcommands of the `kiln` command line, one add/run pair each.
//
// Each Add function declares one subcommand and its flags on the CLI11 app and returns a
// Subcommand whose `run` executes it once the command line is parsed: it builds the library
// options from the flags, calls one library function, prints the result on stdout (one JSON
// object with --json) and diagnostics on stderr, and returns the exit code. kiln_main.cc only
// adds them, parses, and runs the one that was parsed.
// Thread safety: called from main's thread only.
#ifndef KILN_TOOLS_CLI_CLI_COMMANDS_H_
#define KILN_TOOLS_CLI_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "formats/status.h"

namespace kiln {

// Exit codes of `kiln`.
inline constexpr int kExitOk = 0;
inline constexpr int kExitDataProblem = 1;    // the data has problems (or an I/O error)
inline constexpr int kExitUsage = 2;          // bad flags or arguments
inline constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report it

// A declared subcommand. `command` is owned by the parent CLI::App; `run` may be called once,
// after a successful parse in which command->parsed() is true.
struct Subcommand {
  CLI::App* command = nullptr;
  std::function<int()> run;
};

Subcommand AddPackCommand(CLI::App& app);     // kiln pack INPUT OUTPUT [flags]
Subcommand AddVerifyCommand(CLI::App& app);   // kiln verify DATASET [--deep] [--json]
Subcommand AddInspectCommand(CLI::App& app);  // kiln inspect DATASET [--json]
Subcommand AddShowCommand(CLI::App& app);     // kiln show DATASET (--index I | --grid RxC) -o PNG
Subcommand AddBenchCommand(CLI::App& app);    // kiln bench DATASET [flags]
Subcommand AddMergeCommand(CLI::App& app);    // kiln merge OUT.parts OUT [--resume] [--reshard]
Subcommand AddPlanCommand(CLI::App& app);     // kiln plan INPUT PLAN.json --of N [flags]
Subcommand AddStatsCommand(CLI::App& app);    // kiln stats FILES... [--json] [--png OUT]
// kiln completion [-o FILE]: the bash completion script of every subcommand declared on `app`
// (tools/cli/cli_completion.cc); declare it after the others.
Subcommand AddCompletionCommand(CLI::App& app);

// Reports a failed command: the message on stderr and, with `json`, {"ok": false, "error": ...,
// "exit_code": ...} on stdout so scripts always get one JSON object. Returns the exit code:
// kExitUsage for InvalidArgument, kExitInterrupted for Cancelled, else kExitDataProblem.
int FailCommand(const Status& status, bool json);

// Returns the exit code FailCommand returns for `status`.
int ExitCodeFor(const Status& status);

// Returns the subcommand of `app` called `name`, or nullptr.
CLI::App* FindSubcommand(CLI::App& app, const std::string& name);

// Returns the names of `app`'s subcommands, comma-separated, in declaration order.
std::string SubcommandNames(CLI::App& app);

// Returns the footer of a subcommand's --help: its exit codes, one "N meaning" per element, and,
// when `json_keys` is not empty, the top-level keys of its --json object as one line
// "JSON keys (--json): a, b, c" (tests/tools/kiln_cli_test.cc checks that each listed key is in
// the JSON the subcommand prints).
std::string HelpFooter(const std::vector<std::string>& exit_codes, const std::string& json_keys);

}  // namespace kiln

#endif  // KILN_TOOLS_CLI_CLI_COMMANDS_H_
