// The world: rendezvous through a c10d TCPStore, then one process group over all ranks.
// Gloo on CPU, NCCL on CUDA by default; Gloo over CUDA tensors on request (docs/dist.md).
#pragma once
#include <chrono>
#include <string>

#include "vescale/dist/launch_env.h"
#include "vescale/dist/process_group.h"

namespace vescale::dist {

struct InitOptions {
  // "cpu", "cuda" (one device per local rank), or "auto" (cuda when present).
  std::string device = "auto";
  // "" (auto: nccl on cuda, gloo on cpu), "gloo" or "nccl". Empty defers to the env var
  // VESCALE_BACKEND. Gloo on cuda stages through host memory and lets local ranks share a GPU
  // when there are fewer GPUs than ranks (tests; docs/dist.md); NCCL needs one GPU per rank.
  std::string backend = "";
  // The timeout of every collective and of the rendezvous. 0 means: VESCALE_COLLECTIVE_TIMEOUT_S
  // if set, else 600 s.
  std::chrono::milliseconds timeout{0};
};

// Reads the launch env and joins the world. Collective: every rank must call it. Process-wide:
// without OMP_NUM_THREADS, several ranks on one node get threads_per_rank() intra-op threads each.
void init(const InitOptions& options = {});
bool is_initialized();
// Shuts the process groups down collectively. Call before a normal exit.
void shutdown();

const LaunchEnv& launch_env();
ProcessGroup& world();
int rank();
int world_size();
// "cpu" or "cuda": where this rank's tensors live.
const std::string& device_type();
// The device this rank's tensors go on: cuda:LOCAL_RANK (cuda:LOCAL_RANK % GPUs for Gloo
// ranks sharing GPUs), or cpu.
std::string device_string();

// Creates a group over `global_ranks` (sorted; must include this rank). Collective over its
// members, who must call it in the same order with the same `key`.
ProcessGroup new_group(const std::string& key, const std::vector<int>& global_ranks);

}  // namespace vescale::dist
