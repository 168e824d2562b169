#include "vescale/dist/launch_env.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <functional>

#include "vescale/common/check.h"

extern char** environ;

namespace vescale::dist {

namespace {

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

int parse_int(const std::string& key, const std::string& value) {
  int out = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  VESCALE_CHECK(ec == std::errc() && ptr == end && !value.empty(), "launch env: ", key, "='", value,
                "' is not an integer; set it to a whole number or unset it");
  return out;
}

std::optional<int> get_int(const Env& env, const std::string& key) {
  if (auto* v = find(env, key)) return parse_int(key, *v);
  return std::nullopt;
}

int require_int(const Env& env, const std::string& key, const std::string& family,
                const std::string& because) {
  auto v = get_int(env, key);
  VESCALE_CHECK(v.has_value(), "launch env (", family, "): ", key, " is not set although ", because,
                "; set ", key, " or launch with vescale-run / torchrun / mpirun");
  return *v;
}

// Slurm writes tasks-per-node as "4" or "4(x2),3"; the first count is this layout's per-node size.
std::optional<int> slurm_tasks_per_node(const Env& env) {
  for (const char* key : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (auto* v = find(env, key)) {
      std::string head = v->substr(0, v->find_first_of("(,"));
      return parse_int(key, head);
    }
  }
  return std::nullopt;
}

void validate_ranks(const LaunchEnv& e, const std::string& rank_key, const std::string& world_key,
                    const std::string& lrank_key, const std::string& lworld_key) {
  const std::string fam = "launch env (" + e.source + "): ";
  VESCALE_CHECK(e.world_size >= 1, fam, world_key, "=", e.world_size, " must be at least 1");
  VESCALE_CHECK(e.rank >= 0 && e.rank < e.world_size, fam, rank_key, "=", e.rank,
                " is outside [0, ", world_key, "=", e.world_size,
                "); every rank needs 0 <= ", rank_key, " < ", world_key);
  VESCALE_CHECK(e.local_world_size >= 1 && e.local_world_size <= e.world_size, fam, lworld_key, "=",
                e.local_world_size, " must be in [1, ", world_key, "=", e.world_size, "]");
  VESCALE_CHECK(e.local_rank >= 0 && e.local_rank < e.local_world_size, fam, lrank_key, "=",
                e.local_rank, " is outside [0, ", lworld_key, "=", e.local_world_size, ")");
}

void validate_master(const LaunchEnv& e) {
  const std::string fam = "launch env (" + e.source + "): ";
  VESCALE_CHECK(e.master_port > 0 && e.master_port < 65536, fam, "MASTER_PORT=", e.master_port,
                " is not a TCP port; use 1..65535");
  VESCALE_CHECK(!e.master_addr.empty(), fam, "MASTER_ADDR is empty; set it to rank 0's host");
}

// MPI and Slurm launches carry no rendezvous address. One node: loopback. Several nodes: the
// user must export MASTER_ADDR. The port defaults to one derived from the job id, so that two
// jobs on one machine don't collide.
void fill_master(const Env& env, LaunchEnv& e, const std::string& job_id_key) {
  if (auto* a = find(env, "MASTER_ADDR")) {
    e.master_addr = *a;
  } else {
    VESCALE_CHECK(
        e.local_world_size == e.world_size, "launch env (", e.source,
        "): the job spans several nodes but MASTER_ADDR is not set; export MASTER_ADDR=<host "
        "of rank 0> (mpirun -x MASTER_ADDR, or in the Slurm script)");
  }
  if (auto p = get_int(env, "MASTER_PORT")) {
    e.master_port = *p;
  } else if (auto* id = find(env, job_id_key)) {
    e.master_port = 20000 + static_cast<int>(std::hash<std::string>{}(*id) % 20000);
  }
}

LaunchEnv from_torchrun(const Env& env) {
  LaunchEnv e;
  // Our launcher sets the same variables as torchrun, and says so.
  e.source = find(env, "VESCALE_LAUNCHED") ? "vescale-run" : "torchrun";
  VESCALE_CHECK(
      find(env, "RANK") && find(env, "WORLD_SIZE"), "launch env (torchrun): ",
      find(env, "RANK") ? "RANK is set but WORLD_SIZE is not" : "WORLD_SIZE is set but RANK is not",
      "; set both, or neither for a single process");
  e.rank = parse_int("RANK", *find(env, "RANK"));
  e.world_size = parse_int("WORLD_SIZE", *find(env, "WORLD_SIZE"));
  // Without LOCAL_* everything is taken to run on one node.
  e.local_world_size = get_int(env, "LOCAL_WORLD_SIZE").value_or(e.world_size);
  e.local_rank =
      get_int(env, "LOCAL_RANK").value_or(e.local_world_size > 0 ? e.rank % e.local_world_size : 0);
  validate_ranks(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (e.world_size > 1) {
    if (auto* a = find(env, "MASTER_ADDR")) {
      e.master_addr = *a;
    } else {
      VESCALE_CHECK(e.local_world_size == e.world_size,
                    "launch env (torchrun): MASTER_ADDR is not set for a multi-node job; set it to "
                    "rank 0's host");
    }
    e.master_port = require_int(env, "MASTER_PORT", "torchrun", "WORLD_SIZE > 1");
  }
  validate_master(e);
  if (auto* v = find(env, "TORCHELASTIC_USE_AGENT_STORE")) e.agent_store = *v == "True";
  e.restart_count = get_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
  e.max_restarts = get_int(env, "TORCHELASTIC_MAX_RESTARTS").value_or(0);
  if (auto* v = find(env, "TORCHELASTIC_RUN_ID")) e.run_id = *v;
  e.round = e.restart_count;
  if (find(env, "VESCALE_AGENT_STORE")) {  // vescale-run's agent
    e.agent_store = true;
    if (e.world_size == 1) {  // a world of one still joins the agent's store
      if (auto* a = find(env, "MASTER_ADDR")) e.master_addr = *a;
      e.master_port = require_int(env, "MASTER_PORT", "vescale-run", "VESCALE_AGENT_STORE is set");
    }
    e.round = get_int(env, "VESCALE_ROUND").value_or(0);
    e.restart_count = get_int(env, "VESCALE_RESTART").value_or(0);
    e.max_restarts = get_int(env, "VESCALE_MAX_RESTARTS").value_or(0);
  }
  return e;
}

LaunchEnv from_openmpi(const Env& env) {
  LaunchEnv e;
  e.source = "openmpi";
  e.rank = require_int(env, "OMPI_COMM_WORLD_RANK", e.source, "Open MPI variables are present");
  e.world_size = require_int(env, "OMPI_COMM_WORLD_SIZE", e.source, "OMPI_COMM_WORLD_RANK is set");
  e.local_rank = get_int(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(e.rank);
  e.local_world_size = get_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(e.world_size);
  validate_ranks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE");
  fill_master(env, e, "OMPI_MCA_ess_base_jobid");
  validate_master(e);
  return e;
}

LaunchEnv from_pmi(const Env& env) {
  LaunchEnv e;
  e.source = "pmi";
  e.rank = require_int(env, "PMI_RANK", e.source, "PMI variables are present");
  e.world_size = require_int(env, "PMI_SIZE", e.source, "PMI_RANK is set");
  e.local_rank = get_int(env, "MPI_LOCALRANKID").value_or(e.rank);
  e.local_world_size = get_int(env, "MPI_LOCALNRANKS").value_or(e.world_size);
  validate_ranks(e, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  fill_master(env, e, "PMI_JOBID");
  validate_master(e);
  return e;
}

LaunchEnv from_slurm(const Env& env) {
  LaunchEnv e;
  e.source = "slurm";
  e.rank = require_int(env, "SLURM_PROCID", e.source, "Slurm task variables are present");
  e.world_size = require_int(env, "SLURM_NTASKS", e.source, "SLURM_PROCID is set");
  e.local_world_size = slurm_tasks_per_node(env).value_or(e.world_size);
  e.local_rank = get_int(env, "SLURM_LOCALID")
                     .value_or(e.local_world_size > 0 ? e.rank % e.local_world_size : 0);
  validate_ranks(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
  fill_master(env, e, "SLURM_JOB_ID");
  validate_master(e);
  return e;
}

}  // namespace

LaunchEnv parse_launch_env(const Env& env) {
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) return from_torchrun(env);
  if (find(env, "OMPI_COMM_WORLD_RANK") || find(env, "OMPI_COMM_WORLD_SIZE"))
    return from_openmpi(env);
  if (find(env, "PMI_RANK") || find(env, "PMI_SIZE")) return from_pmi(env);
  if (find(env, "SLURM_PROCID") && find(env, "SLURM_NTASKS")) return from_slurm(env);
  LaunchEnv e;  // a plain single process
  if (auto* a = find(env, "MASTER_ADDR")) e.master_addr = *a;
  if (auto p = get_int(env, "MASTER_PORT")) e.master_port = *p;
  return e;
}

LaunchEnv launch_env_from_process() {
  Env env;
  for (char** p = environ; *p; ++p) {
    std::string kv(*p);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return parse_launch_env(env);
}

std::string describe(const LaunchEnv& e) {
  std::string extra;
  if (!e.run_id.empty()) extra += "run id " + e.run_id;
  if (e.max_restarts > 0 || e.restart_count > 0)
    extra += (extra.empty() ? "" : ", ") + std::string("restart ") +
             std::to_string(e.restart_count) + " of " + std::to_string(e.max_restarts);
  if (e.round != e.restart_count)
    extra += (extra.empty() ? "" : ", ") + std::string("round ") + std::to_string(e.round);
  if (e.agent_store) extra += (extra.empty() ? "" : ", ") + std::string("the agent's store");
  return extra.empty() ? e.source : e.source + " (" + extra + ")";
}

int threads_per_rank(int local_world_size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int usable = ::sched_getaffinity(0, sizeof set, &set) == 0
                         ? CPU_COUNT(&set)
                         : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, usable / std::max(1, local_world_size));
}

}  // namespace vescale::dist
