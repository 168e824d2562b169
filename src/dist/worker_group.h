// One node's ranks for one round of a launch: started with their launch env, their output
// prefixed, watched until they all exit, stopped when one fails, when the launcher gets a
// signal, or when the caller says so (the restart loop: a peer node failed, a node joined).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "vescale/dist/launcher.h"

namespace vescale::dist {

// Where this node's ranks sit in the round's world.
struct WorkerPlace {
  int node_rank = 0, nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  // Set in each rank's environment beside the launch env (the agent's store, the round).
  std::vector<std::pair<std::string, std::string>> env;
};

// Why the caller stops the ranks: a stop they may finish cleanly (SIGTERM: vescale-train ends
// its step, saves and exits 0), or a stop now (their peers are gone: SIGTERM, then SIGKILL after
// the grace period).
enum class Interrupt { None, Graceful, Now };

struct GroupResult {
  int exit_code = 0;     // 0; the first failing rank's code (128 + signal when killed); 130
  int failed_rank = -1;  // the global rank that failed first, -1 if none did
  std::string failure;   // "rank 1 (pid 4242) failed with signal Killed"
  Interrupt interrupted = Interrupt::None;  // what the caller asked for, if it did
  bool signalled = false;                   // the launcher itself got SIGINT or SIGTERM
  std::string statuses;                     // " rank 0: exit code 0; rank 1: signal Killed;"
};

// Starts this node's options.nproc_per_node ranks of `argv` and waits for them. `poll` is
// asked every 50 ms or so whether to stop them (from outside: it may read a store).
GroupResult run_worker_group(const LauncherOptions& options, const std::vector<std::string>& argv,
                             const WorkerPlace& place, const std::function<Interrupt()>& poll);

}  // namespace vescale::dist
