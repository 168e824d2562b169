// vescale-run: start N ranks of a program on this node, torchrun-style.
//   vescale-run --nproc-per-node 4 -- ./my_prog --flag
#include <cstdio>

#include "launch_flags.h"
#include "vescale/common/check.h"

int main(int argc, char** argv) {
  CLI::App app{"vescale-run: start N ranks of a program with RANK/WORLD_SIZE/MASTER_* set"};
  vescale::dist::LauncherOptions options;
  vescale::apps::add_launch_flags(app, options);
  std::vector<std::string> command;
  app.add_option("command", command, "program and its arguments (after --)")->required();
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);
  try {
    return vescale::dist::launch(options, command);
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "vescale-run: %s\n", e.what());
    return 2;
  }
}
