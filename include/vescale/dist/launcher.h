// The built-in launcher (like torchrun): starts this node's ranks with the launch env set
// (and OMP_NUM_THREADS, as torchrun, unless the caller set it: dist::threads_per_rank),
// prefixes their output with "[rank k]", forwards SIGINT/SIGTERM, and when one rank fails,
// stops the others and reports which rank failed and how. With max_restarts or an elastic
// nnodes (min_nodes < nnodes) it is also torchrun's elastic agent: the launchers meet on a store
// one of them serves, restart every node's ranks when one fails (they resume from the latest
// checkpoint), and re-form the world without a lost node or with a new one
// (docs/fault_tolerance.md).
#pragma once
#include <string>
#include <vector>

namespace vescale::dist {

struct LauncherOptions {
  int nproc_per_node = 1;
  int nnodes = 1;     // the most nodes (--nnodes N or MIN:MAX)
  int min_nodes = 0;  // the fewest a world may have; 0: nnodes (not elastic)
  // Times every node's ranks are started again after one fails (a rank exiting 2, a wrong
  // input, is not restarted: it would fail the same way).
  int max_restarts = 0;
  double rdzv_last_call_s = 15;  // once MIN nodes joined a round, how long it waits for MAX
  double rdzv_timeout_s = 600;   // how long a round waits for MIN nodes
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: a free port on one node, 29500 across nodes
  double grace_seconds = 5;  // after SIGTERM, how long ranks get before SIGKILL
  // Non-empty: each rank runs as "<name>[rank k]" (its argv[0], what ps and top show), the
  // program still being argv[0] of launch(). Empty: argv[0] as given.
  std::string rank_name;

  // Whether the launchers meet on a store of their own (restarts or an elastic world).
  bool agent() const { return max_restarts > 0 || (min_nodes > 0 && min_nodes < nnodes); }
};

// A rank's exit code that says its input (config, plan, flags) is wrong: not restarted.
constexpr int kExitInputError = 2;

// Checks the options; throws an Error naming the flag and the fix.
void validate(const LauncherOptions& options);

// Runs `argv` (program first) as this node's ranks and waits for them (and, as an agent,
// restarts them). Returns 0 when all succeed, else the first failing rank's exit code (128 +
// signal if it was killed) once no restart is left.
int launch(const LauncherOptions& options, const std::vector<std::string>& argv);

// A TCP port that was free a moment ago on this host.
int find_free_port();

}  // namespace vescale::dist
