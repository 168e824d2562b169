#include "vescale/dist/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "dist/node_rendezvous.h"
#include "dist/worker_group.h"
#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/common/input_error.h"

namespace vescale::dist {

namespace {

void print_failure(const GroupResult& r) {
  std::fprintf(stderr, "vescale-run: failed (exit %d).%s\n", r.exit_code, r.statuses.c_str());
}

std::string step_text(const std::optional<int64_t>& step) {
  return step ? " at step " + std::to_string(*step) : "";
}

// The agent: rounds of this node's ranks until one ends the job (docs/fault_tolerance.md).
int rounds(const LauncherOptions& o, const std::vector<std::string>& argv, NodeRendezvous& rdzv) {
  const bool elastic = o.min_nodes > 0 && o.min_nodes < o.nnodes;
  std::optional<int64_t> checkpoint;  // the newest a round reported (a round may fail before)
  for (;;) {
    const auto round = rdzv.join();
    if (!round) {
      const int code = rdzv.finished().value_or(0);
      std::fprintf(stderr, "vescale-run: the job ended (exit %d) while this node waited to join\n",
                   code);
      return code;
    }
    if (elastic || round->number > 0)
      std::fprintf(stderr, "vescale-run: round %d: node %d of %d, ranks %d..%d of %d\n",
                   round->number, round->node_rank, round->nnodes,
                   round->node_rank * o.nproc_per_node,
                   (round->node_rank + 1) * o.nproc_per_node - 1, round->nnodes * o.nproc_per_node);
    WorkerPlace place{round->node_rank,
                      round->nnodes,
                      o.master_addr,
                      rdzv.port(),
                      {{"VESCALE_AGENT_STORE", "1"},
                       {"VESCALE_ROUND", std::to_string(round->number)},
                       {"VESCALE_RESTART", std::to_string(rdzv.restarts())},
                       {"VESCALE_MAX_RESTARTS", std::to_string(o.max_restarts)},
                       {"VESCALE_KEEPERS", rdzv.keepers(*round)}}};
    const GroupResult r = run_worker_group(o, argv, place, [&] { return rdzv.poll(*round); });
    if (r.signalled) {  // the user stops the job
      if (r.exit_code) print_failure(r);
      rdzv.finish(r.exit_code);
      rdzv.leave(*round);
      return r.exit_code;
    }
    // A rank that had not yet taken over SIGTERM (still starting) dies of it: no failure either.
    // Ranks that stopped cleanly before this launcher polled (another node's SIGTERM made them
    // all agree to stop) ended the same round: a launcher still waits to join.
    const bool graceful = r.interrupted == Interrupt::Graceful ||
                          (r.interrupted == Interrupt::None && rdzv.node_waiting(*round));
    if (graceful && (r.exit_code == 0 || r.exit_code == 128 + SIGTERM)) {
      std::fprintf(stderr,
                   "vescale-run: a node is waiting to join; this round's ranks stopped after a "
                   "step (saving a checkpoint) and the world forms again\n");
      continue;
    }
    if (r.exit_code == 0 && r.interrupted == Interrupt::None) {
      rdzv.finish(0);
      rdzv.leave(*round);
      return 0;
    }
    // This node's rank failed, or another node's (then `r` is only how ours were stopped).
    if (r.interrupted != Interrupt::Now)
      rdzv.fail(*round, {r.failure, r.exit_code, r.exit_code == kExitInputError});
    const RoundFailure f = rdzv.failure(*round);
    const int64_t used = rdzv.restarts();
    if (f.final || used > o.max_restarts) {
      if (f.final)
        std::fprintf(stderr,
                     "vescale-run: not restarting: %s, which says its input (config, plan, "
                     "flags) is wrong; a restart would fail the same way\n",
                     f.what.c_str());
      else
        std::fprintf(stderr, "vescale-run: %s%s; no restart left (--max-restarts %d)\n",
                     f.what.c_str(), step_text(rdzv.progress(*round, "step")).c_str(),
                     o.max_restarts);
      if (r.exit_code) print_failure(r);
      rdzv.finish(f.exit_code);
      rdzv.leave(*round);
      return f.exit_code;
    }
    if (const auto reported = rdzv.progress(*round, "checkpoint")) checkpoint = reported;
    std::fprintf(stderr, "vescale-run: restart %lld/%d after %s%s; %s\n",
                 static_cast<long long>(used), o.max_restarts, f.what.c_str(),
                 step_text(rdzv.progress(*round, "step")).c_str(),
                 checkpoint ? ("resuming from step " + std::to_string(*checkpoint)).c_str()
                            : "no checkpoint yet: starting over");
  }
}

int launch_with_restarts(const LauncherOptions& o, const std::vector<std::string>& argv) {
  NodeRendezvous rdzv(o);
  try {
    return rounds(o, argv, rdzv);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // The store's client throws c10's errors when its server (a launcher) is gone.
    VESCALE_FAIL("lost the rendezvous at ", o.master_addr, ":", rdzv.port(),
                 ": the launcher serving it ended or died (", error_text(e),
                 "). This node stops; rerun the job to resume from the latest checkpoint");
  }
}

}  // namespace

int find_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  VESCALE_CHECK(fd >= 0, "launcher: socket() failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  VESCALE_CHECK(ok, "launcher: could not find a free port: ", std::strerror(errno),
                "; pass --master-port");
  return ntohs(addr.sin_port);
}

void validate(const LauncherOptions& o) {
  VESCALE_CHECK(o.nproc_per_node >= 1, "launcher: --nproc-per-node=", o.nproc_per_node,
                " must be at least 1");
  VESCALE_CHECK(o.nnodes >= 1, "launcher: --nnodes=", o.nnodes, " must be at least 1");
  VESCALE_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "launcher: --node-rank=", o.node_rank,
                " must be in [0, --nnodes=", o.nnodes, ")");
  VESCALE_CHECK(o.master_port >= 0 && o.master_port < 65536,
                "launcher: --master-port=", o.master_port, " is not a TCP port");
  VESCALE_CHECK(o.nnodes == 1 || (o.master_addr != "127.0.0.1" && o.master_addr != "localhost"),
                "launcher: --nnodes=", o.nnodes,
                " needs --master-addr set to node 0's address, not ", o.master_addr);
  VESCALE_CHECK(o.grace_seconds >= 0, "launcher: the grace period must not be negative");
  VESCALE_CHECK(o.min_nodes >= 0 && o.min_nodes <= o.nnodes, "launcher: --nnodes=", o.min_nodes,
                ":", o.nnodes, " needs MIN <= MAX");
  VESCALE_CHECK(o.max_restarts >= 0, "launcher: --max-restarts must not be negative");
  VESCALE_CHECK(o.rdzv_last_call_s >= 0 && o.rdzv_timeout_s > 0,
                "launcher: --rdzv-last-call must not be negative and --rdzv-timeout must be "
                "positive");
}

int launch(const LauncherOptions& o, const std::vector<std::string>& argv) {
  try {
    validate(o);
  } catch (const Error& e) {
    throw InputError(e.what());  // bad flags: a restart of the same command fails the same way
  }
  VESCALE_CHECK(!argv.empty(),
                "launcher: no program given; usage: vescale-run --nproc-per-node N -- prog args");
  if (o.agent()) return launch_with_restarts(o, argv);
  const int port = o.master_port > 0 ? o.master_port : (o.nnodes == 1 ? find_free_port() : 29500);
  const GroupResult r = run_worker_group(o, argv, {o.node_rank, o.nnodes, o.master_addr, port, {}},
                                         [] { return Interrupt::None; });
  if (r.exit_code) print_failure(r);
  return r.exit_code;
}

}  // namespace vescale::dist
