// Runs a shell command line as a user would, for the tests that drive our binaries.
#pragma once
#include <string>

namespace vescale::testing {

struct CommandResult {
  int code = -1;  // exit code (-1 when killed by a signal)
  std::string out, err;
  double seconds = 0;
};

// `bash -c '<cmd>'` bounded by `timeout <limit_s>`, capturing stdout and stderr. The command
// must not contain single quotes.
CommandResult run_command(const std::string& cmd, int limit_s = 100);

// The whole text of a file ("" when missing).
std::string slurp(const std::string& path);

}  // namespace vescale::testing
