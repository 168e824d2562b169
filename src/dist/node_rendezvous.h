// The launchers' rendezvous when they restart failed ranks or let the world shrink and grow
// (vescale-run --max-restarts, --nnodes MIN:MAX). One launcher serves a c10d store on
// --master-addr:--master-port (the first to bind that address); every launcher, itself
// included, joins it as a client. On it the launchers form numbered rounds: a round is one
// world: the serving launcher (node 0) and the launchers that joined it, in the order they
// joined (their node ranks). Round k's
// ranks use the same store under "vescale/attempt_<k>/" (LaunchEnv::agent_store), so no round
// reads another's keys, and report their progress there (dist/progress.h). Each launcher also
// serves a keeper: a store holding copies of checkpoints in its memory (dist/peer_memory.h).
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "dist/worker_group.h"
#include "vescale/dist/launcher.h"

namespace vescale::dist {

struct Round {
  int number = 0, node_rank = 0, nnodes = 1;
};

// How a round ended for the whole job, as the first launcher to see it wrote it.
struct RoundFailure {
  std::string what;  // "rank 1 (pid 4242) failed with signal Killed"
  int exit_code = 1;
  bool final = false;  // no restart can help (a rank's input is wrong: exit 2)
};

class NodeRendezvous {
 public:
  // Serves the store when --master-addr is this host's and its port is free, else joins it
  // (waiting up to --rdzv-timeout for it). Throws naming the address when it cannot.
  explicit NodeRendezvous(const LauncherOptions& options);
  ~NodeRendezvous();

  // Joins the round that takes new launchers and waits until it is formed: --nnodes MIN have
  // joined, then up to --rdzv-last-call seconds more for MAX. A launcher too late for a round
  // (or beyond MAX) waits for the next one. nullopt when the job ended meanwhile (finished()).
  // Throws when MIN do not join within --rdzv-timeout, or the serving launcher is gone.
  std::optional<Round> join();

  // While round r runs: Now when another launcher failed it, Graceful when a launcher waits to
  // join and the round has room for it, else None. Reads the store at most every 250 ms.
  Interrupt poll(const Round& r);

  // Whether a launcher waits to join and round r has room for it (the Graceful condition).
  bool node_waiting(const Round& r);
  // This launcher is done with round r (its last): the serving launcher keeps the store until
  // every launcher of its last round left.
  void leave(const Round& r);

  // Records that round r failed (the first launcher to call it wins) and counts a restart.
  void fail(const Round& r, const RoundFailure& failure);
  RoundFailure failure(const Round& r);
  // Restarts the job has used so far (failed rounds).
  int64_t restarts();
  // The last step round r's ranks finished and the last checkpoint they stand on (committed or
  // resumed from), as they reported them; nullopt when none was reported.
  std::optional<int64_t> progress(const Round& r, const char* what);

  // The job is over with `exit_code`: launchers still waiting to join exit with it.
  void finish(int exit_code);
  std::optional<int> finished();

  // The launchers that keep round r's ranks' copies in memory (dist/peer_memory.h): this
  // node's and the next node's in the round, "host:port[,host:port]". Waits for the next node
  // to say where its keeper is.
  std::string keepers(const Round& r);

  bool serving() const { return serving_; }
  int port() const { return port_; }

 private:
  // On the serving launcher: closes round k once enough launchers joined.
  void form(int k);

  LauncherOptions options_;
  int port_ = 0;
  bool serving_ = false;
  c10::intrusive_ptr<c10d::Store> server_, store_;
  // This launcher's keeper of its ranks' and the previous node's copies: a store of its own,
  // which outlives the ranks' restarts.
  c10::intrusive_ptr<c10d::Store> keeper_;
  std::string keeper_at_;
  int next_ = 0;
  Round last_;  // the last round this launcher was in
  bool in_round_ = false;
  std::chrono::steady_clock::time_point polled_{};
};

}  // namespace vescale::dist
