// vescale-run: start N ranks of a program on this node, torchrun-style.
//   vescale-run --nproc-per-node 4 -- ./my_prog --flag
#include <cstdio>
#include <cstring>

#include "launch_flags.h"
#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/common/input_error.h"

int main(int argc, char** argv) {
  // Everything after "--" is the command, verbatim: CLI11 would otherwise read "[a],[b]" as a list.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      split = i;
      break;
    }
  std::vector<std::string> command(argv + std::min(split + 1, argc), argv + argc);

  CLI::App app{
      "vescale-run: start N ranks of a program with RANK/WORLD_SIZE/MASTER_* set\n"
      "usage: vescale-run [options] -- program [args...]"};
  vescale::dist::LauncherOptions options;
  vescale::apps::add_launch_flags(app, options);
  try {
    app.parse(split, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (command.empty()) {
    std::fprintf(stderr,
                 "vescale-run: no program given; put it after --, e.g. vescale-run "
                 "--nproc-per-node 2 -- ./prog\n");
    return 2;
  }
  try {
    return vescale::dist::launch(options, command);
  } catch (const vescale::InputError& e) {
    std::fprintf(stderr, "vescale-run: %s\n", vescale::error_text(e).c_str());
    return 2;  // the flags: fix them
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-run: %s\n", vescale::error_text(e).c_str());
    return 1;  // the launch failed (the rendezvous, a lost launcher)
  }
}
