#include <catch2/catch.hpp>
#include <sched.h>

#include <algorithm>

#include "vescale/common/check.h"
#include "vescale/dist/launch_env.h"

using vescale::dist::parse_launch_env;
using Env = std::map<std::string, std::string>;

TEST_CASE("no launcher means one process on loopback", "[env]") {
  auto e = parse_launch_env({});
  CHECK(e.source == "none");
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.master_addr == "127.0.0.1");
}

TEST_CASE("torchrun variables are read as given", "[env]") {
  auto e = parse_launch_env({{"RANK", "5"},
                             {"WORLD_SIZE", "8"},
                             {"LOCAL_RANK", "1"},
                             {"LOCAL_WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "node0"},
                             {"MASTER_PORT", "1234"}});
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 1234);
}

TEST_CASE("ranks started by vescale-run say so, not torchrun", "[env]") {
  auto e = parse_launch_env(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "999"}, {"VESCALE_LAUNCHED", "1"}});
  CHECK(e.source == "vescale-run");
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
}

TEST_CASE("torchrun without LOCAL_* means one node", "[env]") {
  auto e = parse_launch_env({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_PORT", "999"}});
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 3);
  CHECK(e.master_addr == "127.0.0.1");
}

TEST_CASE("Open MPI variables, port derived from the job id", "[env]") {
  Env env{{"OMPI_COMM_WORLD_RANK", "3"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
          {"OMPI_MCA_ess_base_jobid", "1641414657"}};
  auto a = parse_launch_env(env);
  CHECK(a.source == "openmpi");
  CHECK(a.rank == 3);
  CHECK(a.world_size == 4);
  CHECK(a.local_rank == 3);
  CHECK(a.master_addr == "127.0.0.1");
  CHECK(a.master_port >= 20000);
  CHECK(a.master_port < 40000);
  // Every rank of the job derives the same port; another job gets (almost surely) another one.
  env["OMPI_COMM_WORLD_RANK"] = "0";
  CHECK(parse_launch_env(env).master_port == a.master_port);
  env["OMPI_MCA_ess_base_jobid"] = "1641414658";
  CHECK(parse_launch_env(env).master_port != a.master_port);
  env["MASTER_PORT"] = "4321";
  CHECK(parse_launch_env(env).master_port == 4321);
}

TEST_CASE("PMI (MPICH/Hydra) variables", "[env]") {
  auto e = parse_launch_env(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  CHECK(e.source == "pmi");
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
  CHECK(e.local_rank == 1);
}

TEST_CASE("Slurm variables, with a compressed tasks-per-node list", "[env]") {
  auto e = parse_launch_env({{"SLURM_PROCID", "6"},
                             {"SLURM_NTASKS", "8"},
                             {"SLURM_LOCALID", "2"},
                             {"SLURM_TASKS_PER_NODE", "4(x2)"},
                             {"MASTER_ADDR", "n0"},
                             {"SLURM_JOB_ID", "77"}});
  CHECK(e.source == "slurm");
  CHECK(e.rank == 6);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 4);
  CHECK(e.master_addr == "n0");
}

TEST_CASE("torchrun variables win over MPI ones", "[env]") {
  auto e = parse_launch_env({{"RANK", "1"},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_PORT", "5"},
                             {"OMPI_COMM_WORLD_RANK", "0"},
                             {"OMPI_COMM_WORLD_SIZE", "1"}});
  CHECK(e.source == "torchrun");
  CHECK(e.rank == 1);
}

TEST_CASE("inconsistent launch envs are rejected with the variable named", "[env]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "0"}}), Contains("WORLD_SIZE is not"));
  CHECK_THROWS_WITH(parse_launch_env({{"WORLD_SIZE", "2"}}), Contains("RANK is not"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}),
                    Contains("RANK=4 is outside [0, WORLD_SIZE=4)"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "-1"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}),
                    Contains("RANK=-1"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "two"}, {"WORLD_SIZE", "4"}}),
                    Contains("RANK='two' is not an integer"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "4x"}}),
                    Contains("WORLD_SIZE='4x'"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
                    Contains("WORLD_SIZE=0 must be at least 1"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}}),
                    Contains("MASTER_PORT is not set"));
  CHECK_THROWS_WITH(
      parse_launch_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}),
      Contains("MASTER_PORT=70000 is not a TCP port"));
  CHECK_THROWS_WITH(parse_launch_env({{"RANK", "1"},
                                      {"WORLD_SIZE", "4"},
                                      {"LOCAL_RANK", "2"},
                                      {"LOCAL_WORLD_SIZE", "2"},
                                      {"MASTER_PORT", "1"},
                                      {"MASTER_ADDR", "h"}}),
                    Contains("LOCAL_RANK=2 is outside [0, LOCAL_WORLD_SIZE=2)"));
  CHECK_THROWS_WITH(
      parse_launch_env(
          {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
      Contains("MASTER_ADDR is not set for a multi-node job"));
  CHECK_THROWS_WITH(parse_launch_env({{"OMPI_COMM_WORLD_RANK", "0"}}),
                    Contains("OMPI_COMM_WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(parse_launch_env({{"OMPI_COMM_WORLD_RANK", "0"},
                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}),
                    Contains("export MASTER_ADDR"));
  CHECK_THROWS_WITH(parse_launch_env({{"PMI_RANK", "3"}, {"PMI_SIZE", "2"}}),
                    Contains("PMI_RANK=3"));
  CHECK_THROWS_WITH(
      parse_launch_env(
          {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "8"}}),
      Contains("SLURM_NTASKS_PER_NODE=8 must be in [1, SLURM_NTASKS=4]"));
  CHECK_THROWS_AS(parse_launch_env({{"RANK", "x"}, {"WORLD_SIZE", "1"}}), vescale::Error);
}

TEST_CASE("torchrun's elastic agent: its store, run id and restart count are read", "[env]") {
  auto e = parse_launch_env({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_PORT", "29400"},
                             {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                             {"TORCHELASTIC_RESTART_COUNT", "1"},
                             {"TORCHELASTIC_MAX_RESTARTS", "3"},
                             {"TORCHELASTIC_RUN_ID", "job7"}});
  CHECK(e.source == "torchrun");
  CHECK(e.agent_store);  // rank 0 too joins the agent's store as a client
  CHECK(e.restart_count == 1);
  CHECK(e.max_restarts == 3);
  CHECK(e.run_id == "job7");
  CHECK(vescale::dist::describe(e) == "torchrun (run id job7, restart 1 of 3, the agent's store)");
  // torchrun's own spelling only ("True"); without the agent, rank 0 serves the store.
  e = parse_launch_env({{"RANK", "0"},
                        {"WORLD_SIZE", "2"},
                        {"MASTER_PORT", "1"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  CHECK_FALSE(e.agent_store);
  CHECK(vescale::dist::describe(e) == "torchrun");
}

TEST_CASE("vescale-run's agent: its store, the round and the restart count are read", "[env]") {
  auto e = parse_launch_env({{"RANK", "1"},
                             {"WORLD_SIZE", "2"},
                             {"MASTER_PORT", "29400"},
                             {"VESCALE_LAUNCHED", "1"},
                             {"VESCALE_AGENT_STORE", "1"},
                             {"VESCALE_ROUND", "2"},
                             {"VESCALE_RESTART", "1"},
                             {"VESCALE_MAX_RESTARTS", "3"}});
  CHECK(e.source == "vescale-run");
  CHECK(e.agent_store);
  CHECK(e.round == 2);  // the store prefix: a new world is a round without a restart
  CHECK(e.restart_count == 1);
  CHECK(e.max_restarts == 3);
  CHECK(vescale::dist::describe(e) == "vescale-run (restart 1 of 3, round 2, the agent's store)");
  // A world of one still joins the agent's store (its progress, its copies in memory).
  e = parse_launch_env({{"RANK", "0"},
                        {"WORLD_SIZE", "1"},
                        {"MASTER_ADDR", "127.0.0.2"},
                        {"MASTER_PORT", "29411"},
                        {"VESCALE_AGENT_STORE", "1"}});
  CHECK(e.agent_store);
  CHECK(e.master_addr == "127.0.0.2");
  CHECK(e.master_port == 29411);
  // torchrun's rounds are its restarts.
  e = parse_launch_env({{"RANK", "0"},
                        {"WORLD_SIZE", "2"},
                        {"MASTER_PORT", "29400"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                        {"TORCHELASTIC_RESTART_COUNT", "2"}});
  CHECK(e.round == 2);
}

TEST_CASE("threads per rank share this process's cores among the local ranks", "[env]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  CHECK(vescale::dist::threads_per_rank(1) == cores);
  CHECK(vescale::dist::threads_per_rank(2) == std::max(1, cores / 2));
  CHECK(vescale::dist::threads_per_rank(4 * cores) == 1);  // never 0
}
