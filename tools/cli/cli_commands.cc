#include "tools/cli/cli_commands.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

namespace kiln {

int ExitCodeFor(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage
         : status.code() == StatusCode::kCancelled     ? kExitInterrupted
                                                       : kExitDataProblem;
}

int FailCommand(const Status& status, bool json) {
  std::fprintf(stderr, "kiln: %s\n", status.message().c_str());
  const int code = ExitCodeFor(status);
  if (json) {
    std::cout
        << nlohmann::json{{"ok", false}, {"error", status.message()}, {"exit_code", code}}.dump()
        << "\n";
  }
  return code;
}

CLI::App* FindSubcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* c : app.get_subcommands(std::function<bool(CLI::App*)>())) {
    if (c->check_name(name)) return c;
  }
  return nullptr;
}

std::string SubcommandNames(CLI::App& app) {
  std::string names;
  for (CLI::App* c : app.get_subcommands(std::function<bool(CLI::App*)>())) {
    names += (names.empty() ? "" : ", ") + c->get_name();
  }
  return names;
}

std::string HelpFooter(const std::vector<std::string>& exit_codes, const std::string& json_keys) {
  std::string footer = "Exit codes:\n";
  for (const std::string& e : exit_codes) footer += "  " + e + "\n";
  if (!json_keys.empty()) footer += "JSON keys (--json): " + json_keys + "\n";
  return footer;
}

}  // namespace kiln
