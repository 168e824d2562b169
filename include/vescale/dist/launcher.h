// The built-in launcher (like torchrun): starts this node's ranks with the launch env set
// (and OMP_NUM_THREADS, as torchrun, unless the caller set it: dist::threads_per_rank),
// prefixes their output with "[rank k]", forwards SIGINT/SIGTERM, and when one rank fails,
// stops the others and reports which rank failed and how.
#pragma once
#include <string>
#include <vector>

namespace vescale::dist {

struct LauncherOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: a free port on one node, 29500 across nodes
  double grace_seconds = 5;  // after SIGTERM, how long ranks get before SIGKILL
  // Non-empty: each rank runs as "<name>[rank k]" (its argv[0], what ps and top show), the
  // program still being argv[0] of launch(). Empty: argv[0] as given.
  std::string rank_name;
};

// Checks the options; throws an Error naming the flag and the fix.
void validate(const LauncherOptions& options);

// Runs `argv` (program first) as this node's ranks and waits for them. Returns 0 when all
// succeed, else the first failing rank's exit code (128 + signal if it was killed).
int launch(const LauncherOptions& options, const std::vector<std::string>& argv);

// A TCP port that was free a moment ago on this host.
int find_free_port();

}  // namespace vescale::dist
