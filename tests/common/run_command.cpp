#include "common/run_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace vescale::testing {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CommandResult run_command(const std::string& cmd, int limit_s) {
  static int n = 0;
  const std::string base =
      "/tmp/vescale_test_cmd." + std::to_string(::getpid()) + "." + std::to_string(n++);
  const std::string line = "timeout " + std::to_string(limit_s) + " bash -c '" + cmd + "' > " +
                           base + ".out 2> " + base + ".err";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(line.c_str());
  CommandResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace vescale::testing
