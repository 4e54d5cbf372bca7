// The `kiln` command line: declares the subcommands (tools/cli/cli_commands.h), parses with CLI11
// and runs the one that was given. Exit codes: 0 success, 1 the data has problems, 2 usage error,
// 130 interrupted.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/version.h"
#include "reader/loader.h"
#include "tools/cli/cli_commands.h"

namespace {

// Returns the first argument that is not an option (the subcommand's name), or "" when there is
// none. `kiln` itself takes no option with a value, so this is what CLI11 takes as the
// subcommand.
std::string FirstWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] != '-') return argv[i];
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  kiln::EnableRemoteDatasets();  // every subcommand that opens a dataset also takes its URL
  CLI::App app{"kiln: pack image folders into ready-to-train tensors, verify them, read them fast"};
  app.name("kiln");
  app.require_subcommand(1);
  app.set_version_flag("--version", kiln::kToolVersionString);
  const std::vector<kiln::Subcommand> commands = {
      kiln::AddPackCommand(app), kiln::AddVerifyCommand(app), kiln::AddInspectCommand(app),
      kiln::AddShowCommand(app), kiln::AddBenchCommand(app),  kiln::AddMergeCommand(app),
      kiln::AddPlanCommand(app), kiln::AddStatsCommand(app),  kiln::AddCompletionCommand(app)};
  std::string help_topic;
  CLI::App* help = app.add_subcommand("help", "Print the help of kiln or of one subcommand");
  help->add_option("subcommand", help_topic, "The subcommand to describe");
  // After the subcommands: CLI11 copies the parent's footer into each one added after it.
  app.footer(
      "Run `kiln help SUBCOMMAND` (or `kiln SUBCOMMAND --help`) for its flags, exit codes and "
      "JSON keys.\nExit codes: 0 success, 1 the data has problems (or an I/O error), 2 usage "
      "error, 130 interrupted.");

  // An unknown word where the subcommand goes: say so (CLI11 would say "A subcommand is
  // required", which sends the user looking for the wrong mistake).
  const std::string word = FirstWord(argc, argv);
  if (!word.empty() && kiln::FindSubcommand(app, word) == nullptr) {
    std::fprintf(stderr, "kiln: unknown subcommand '%s'; the subcommands are: %s\n", word.c_str(),
                 kiln::SubcommandNames(app).c_str());
    return kiln::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other parse error is a usage error (exit 2).
    const int code = app.exit(e);
    return code == 0 ? kiln::kExitOk : kiln::kExitUsage;
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      app.clear();  // else CLI11 prints the help of the parsed subcommand: `help` itself
      std::fputs(app.help().c_str(), stdout);
      return kiln::kExitOk;
    }
    CLI::App* topic = kiln::FindSubcommand(app, help_topic);
    if (topic == nullptr || topic == help) {
      std::fprintf(stderr, "kiln help: unknown subcommand '%s'; the subcommands are: %s\n",
                   help_topic.c_str(), kiln::SubcommandNames(app).c_str());
      return kiln::kExitUsage;
    }
    std::fputs(topic->help(app.get_name()).c_str(), stdout);
    return kiln::kExitOk;
  }
  for (const kiln::Subcommand& c : commands) {
    if (c.command->parsed()) return c.run();
  }
  return kiln::kExitUsage;
}
