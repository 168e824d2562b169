#include "vescale/dist/world.h"

#include <optional>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "dist/process_group_impl.h"
#include "dist/store.h"
#include "dist/world_state.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/cuda_device.h"

namespace vescale::dist {

namespace {

WorldState* g_world = nullptr;

// Seconds from the environment variable `name`, or nullopt when it is unset.
std::optional<std::chrono::milliseconds> seconds_from_env(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return std::nullopt;
  char* end = nullptr;
  double secs = std::strtod(s, &end);
  VESCALE_CHECK(end && *end == '\0' && secs > 0, name, "='", s,
                "' is not a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
}

std::chrono::milliseconds resolve_timeout(std::chrono::milliseconds requested) {
  if (requested.count() > 0) return requested;
  return seconds_from_env("VESCALE_COLLECTIVE_TIMEOUT_S").value_or(std::chrono::minutes(10));
}

std::string resolve_device(const std::string& requested) {
  VESCALE_CHECK(requested == "auto" || requested == "cpu" || requested == "cuda",
                "dist::init: device '", requested, "' is unknown; use cpu, cuda, or auto");
  if (requested != "auto") return requested;
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

// InitOptions::backend, else VESCALE_BACKEND, else the device's own: NCCL on cuda, Gloo on cpu.
Backend resolve_backend(const std::string& requested, const std::string& device) {
  std::string name = requested, from = "InitOptions::backend";
  if (name.empty())
    if (const char* env = std::getenv("VESCALE_BACKEND"); env && *env)
      name = env, from = "VESCALE_BACKEND";
  if (name.empty() || name == "auto") return device == "cuda" ? Backend::Nccl : Backend::Gloo;
  VESCALE_CHECK(name == "gloo" || name == "nccl", "dist::init: ", from, "='", name,
                "' is unknown; use gloo, nccl, or leave it empty for the device's default");
  VESCALE_CHECK(name == "gloo" || device == "cuda", "dist::init: ", from,
                "=nccl needs CUDA tensors, but the device is cpu; use device cuda, or gloo");
  return name == "nccl" ? Backend::Nccl : Backend::Gloo;
}

// This rank's GPU: its local rank. Gloo ranks share the GPUs round-robin when there are fewer
// GPUs than local ranks (several test ranks on one GPU); NCCL cannot, so that is an error.
int resolve_cuda_device(const LaunchEnv& env, Backend kind) {
  const int n = cuda_device_count();
  VESCALE_CHECK(n > 0, "dist::init: device cuda, but no CUDA device is visible (no driver, no ",
                "GPU, or CUDA_VISIBLE_DEVICES is empty); use device cpu or auto");
  if (env.local_rank < n) return env.local_rank;
  VESCALE_CHECK(kind == Backend::Gloo, "dist::init: local rank ", env.local_rank, " of ",
                env.local_world_size, " has no GPU of its own (", n,
                " visible) and NCCL cannot run several ranks on one GPU; launch at most ", n,
                " ranks per node, or set VESCALE_BACKEND=gloo to share GPUs over Gloo "
                "(staged through host memory: for tests, not for speed)");
  return env.local_rank % n;
}

// Where Gloo binds: an interface if asked, loopback when the job is on one node, else the host's
// name.
std::string gloo_host_for(const LaunchEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    return std::string("if:") + ifname;
  if (env.local_world_size == env.world_size) return "127.0.0.1";
  return "";
}

}  // namespace

WorldState& world_state() {
  VESCALE_CHECK(g_world, "dist: the world is not initialised; call vescale::dist::init() first");
  return *g_world;
}

void init(const InitOptions& options) {
  VESCALE_CHECK(!g_world,
                "dist::init: already initialised; call dist::shutdown() before initialising again");
  auto state = std::make_unique<WorldState>();
  state->env = launch_env_from_process();
  state->timeout = resolve_timeout(options.timeout);
  state->device_type = resolve_device(options.device);
  state->kind = resolve_backend(options.backend, state->device_type);
  state->gloo_host = gloo_host_for(state->env);
  if (state->device_type == "cuda") {
    state->cuda_device = resolve_cuda_device(state->env, state->kind);
    cuda_set_device(state->cuda_device);
  }

  // N ranks on one machine each taking every core oversubscribe it N times: share the cores
  // unless the user (or torchrun, which sets 1) chose with OMP_NUM_THREADS.
  if (const char* omp = std::getenv("OMP_NUM_THREADS");
      (!omp || !*omp) && state->env.local_world_size > 1)
    at::set_num_threads(threads_per_rank(state->env.local_world_size));

  // Joining is waiting for every process to start (a loaded machine, a slow file system), not
  // for a peer's collective: its own limit when VESCALE_RENDEZVOUS_TIMEOUT_S says so.
  state->store = make_store(
      state->env, seconds_from_env("VESCALE_RENDEZVOUS_TIMEOUT_S").value_or(state->timeout));
  GroupSpec spec;
  spec.name = "world";
  spec.global_ranks.resize(state->env.world_size);
  for (int r = 0; r < state->env.world_size; ++r) spec.global_ranks[r] = r;
  spec.rank = state->env.rank;
  spec.kind = state->kind;
  spec.cuda = state->device_type == "cuda";
  spec.timeout = state->timeout;
  state->world = make_process_group(prefixed("world/", state->store), spec, state->gloo_host);
  g_world = state.release();
  if (!log::initialized()) log::init(g_world->env.rank);  // an embedder's: the apps' format
  log::debug(detail::cat("dist: rank ", rank(), " of ", world_size(), " joined (",
                         g_world->env.source, ", ", to_string(g_world->kind), " on ",
                         device_string(), ", timeout ", g_world->timeout.count(), " ms)"));
}

bool is_initialized() { return g_world != nullptr; }

void shutdown() {
  if (!g_world) return;
  // Collective: a final barrier makes sure no peer still needs our sockets.
  std::unique_ptr<WorldState> state(g_world);
  g_world = nullptr;
  if (state->env.world_size > 1) state->world.barrier().wait();
  for (auto& g : state->groups) g.impl().backend->shutdown();
  state->world.impl().backend->shutdown();
}

const LaunchEnv& launch_env() { return world_state().env; }
ProcessGroup& world() { return world_state().world; }
int rank() { return world_state().env.rank; }
int world_size() { return world_state().env.world_size; }
const std::string& device_type() { return world_state().device_type; }

std::string device_string() {
  auto& s = world_state();
  return s.device_type == "cuda" ? "cuda:" + std::to_string(s.cuda_device) : "cpu";
}

ProcessGroup new_group(const std::string& key, const std::vector<int>& global_ranks) {
  auto& s = world_state();
  VESCALE_CHECK(
      !global_ranks.empty() && std::is_sorted(global_ranks.begin(), global_ranks.end()) &&
          std::adjacent_find(global_ranks.begin(), global_ranks.end()) == global_ranks.end(),
      "dist::new_group('", key, "'): ranks must be non-empty, sorted, and distinct");
  auto me = std::find(global_ranks.begin(), global_ranks.end(), s.env.rank);
  VESCALE_CHECK(me != global_ranks.end(), "dist::new_group('", key, "'): this rank (", s.env.rank,
                ") is not a member; only members may create a group");
  for (int r : global_ranks)
    VESCALE_CHECK(r >= 0 && r < s.env.world_size, "dist::new_group('", key, "'): rank ", r,
                  " is outside the world of ", s.env.world_size);
  GroupSpec spec;
  spec.name = key;
  spec.global_ranks = global_ranks;
  spec.rank = static_cast<int>(me - global_ranks.begin());
  spec.kind = s.kind;
  spec.cuda = s.device_type == "cuda";
  spec.timeout = s.timeout;
  auto g = make_process_group(prefixed("group/" + key + "/", s.store), spec, s.gloo_host);
  s.groups.push_back(g);
  return g;
}

}  // namespace vescale::dist
