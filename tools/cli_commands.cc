#include "tools/cli_commands.h"

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

}  // namespace kiln
