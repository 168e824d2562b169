// Who am I in the job? Read from whichever launcher started this process.
#pragma once
#include <map>
#include <string>

namespace vescale::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Which launcher the values came from: "vescale-run", "torchrun" (also Slurm with exported
  // RANK/WORLD_SIZE), "openmpi", "pmi" (MPICH/Hydra, Intel MPI), "slurm", or "none" (one process).
  std::string source = "none";
  // An agent serves the store on MASTER_PORT itself, so every rank joins it as a client:
  // torchrun's elastic agent (TORCHELASTIC_*) or vescale-run's (VESCALE_AGENT_STORE, with
  // restarts or an elastic world). `round` names the attempt (its keys' prefix): torchrun's
  // restart count, or vescale-run's round (a new world counts one without a restart).
  bool agent_store = false;
  int restart_count = 0, max_restarts = 0, round = 0;
  std::string run_id;
};

// Parses a launch environment. Precedence: torchrun-style RANK/WORLD_SIZE, then Open MPI's
// OMPI_COMM_WORLD_*, then PMI_*, then SLURM_*. Values within the chosen family must agree
// with each other (rank < world, local rank < local world, ...); otherwise this throws an
// Error that names the variable and the fix.
LaunchEnv parse_launch_env(const std::map<std::string, std::string>& env);

// The same, over this process's environment.
LaunchEnv launch_env_from_process();

// "torchrun", or "torchrun (run id abc, restart 1 of 3, the agent's store)": for the start line.
std::string describe(const LaunchEnv& env);

// Intra-op threads for one of `local_world_size` ranks on this node: the CPUs this process may
// use (its affinity: all of them unless a launcher or taskset bound it) shared evenly, at least
// 1. Without it every rank takes every core and N ranks oversubscribe the machine N times.
int threads_per_rank(int local_world_size);

}  // namespace vescale::dist
