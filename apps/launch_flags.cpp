#include "launch_flags.h"

#include <string>

namespace vescale::apps {

namespace {

// CLI11's own number checks print their range as doubles ("0.000000 to 1797693..."); ours say
// the bound and what the flag is for.
CLI::Validator at_least(long lo, const std::string& what) {
  return CLI::Validator(
      [lo, what](std::string& s) -> std::string {
        try {
          size_t used = 0;
          const long v = std::stol(s, &used);
          if (used == s.size() && v >= lo) return "";
        } catch (const std::exception&) {
        }
        return "'" + s + "' must be a whole number, at least " + std::to_string(lo) + " (" + what +
               ")";
      },
      "INT>=" + std::to_string(lo));
}

}  // namespace

void add_launch_flags(CLI::App& app, dist::LauncherOptions& o) {
  app.add_option("--nproc-per-node", o.nproc_per_node, "ranks to start on this node")
      ->check(at_least(1, "the number of ranks to start on this node"));
  app.add_option("--nnodes", o.nnodes, "number of nodes in the job")
      ->check(at_least(1, "the number of nodes"));
  app.add_option("--node-rank", o.node_rank, "this node's index in [0, nnodes)")
      ->check(at_least(0, "this node's index, 0 for the first node"));
  app.add_option("--master-addr", o.master_addr, "address of node 0 (rendezvous host)");
  app.add_option("--master-port", o.master_port,
                 "rendezvous port (default: a free one on one node, 29500 across nodes)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--grace-seconds", o.grace_seconds,
                 "after one rank fails, seconds before the rest are killed")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace vescale::apps
