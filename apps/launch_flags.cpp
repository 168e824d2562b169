#include "launch_flags.h"

namespace vescale::apps {

void add_launch_flags(CLI::App& app, dist::LauncherOptions& o) {
  app.add_option("--nproc-per-node", o.nproc_per_node, "ranks to start on this node")->check(CLI::PositiveNumber);
  app.add_option("--nnodes", o.nnodes, "number of nodes in the job")->check(CLI::PositiveNumber);
  app.add_option("--node-rank", o.node_rank, "this node's index in [0, nnodes)")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", o.master_addr, "address of node 0 (rendezvous host)");
  app.add_option("--master-port", o.master_port, "rendezvous port (default: a free one on one node, 29500 across nodes)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--grace-seconds", o.grace_seconds, "after one rank fails, seconds before the rest are killed")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace vescale::apps
