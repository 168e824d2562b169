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
  app.add_option_function<std::string>(
         "--nnodes",
         [&o](const std::string& s) {
           // N, or MIN:MAX for an elastic world (as torchrun's).
           const auto colon = s.find(':');
           auto number = [&](const std::string& part) {
             size_t used = 0;
             int v = -1;
             try {
               v = std::stoi(part, &used);
             } catch (const std::exception&) {
             }
             if (used != part.size() || v < 1)
               throw CLI::ValidationError("--nnodes", "'" + s +
                                                          "' must be a number of nodes (at least "
                                                          "1) or MIN:MAX, e.g. 1:4");
             return v;
           };
           o.nnodes = number(colon == std::string::npos ? s : s.substr(colon + 1));
           o.min_nodes = colon == std::string::npos ? 0 : number(s.substr(0, colon));
           if (o.min_nodes > o.nnodes)
             throw CLI::ValidationError("--nnodes", "'" + s + "': MIN must not exceed MAX");
         },
         "number of nodes in the job, or MIN:MAX for an elastic world")
      ->type_name("N|MIN:MAX");
  app.add_option("--max-restarts", o.max_restarts,
                 "start every node's ranks again this many times when one fails (they resume "
                 "from the latest checkpoint)")
      ->check(at_least(0, "how many times to restart failed ranks"));
  app.add_option("--rdzv-last-call", o.rdzv_last_call_s,
                 "with --nnodes MIN:MAX: seconds a new world waits for more nodes once MIN "
                 "joined (default 15)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rdzv-timeout", o.rdzv_timeout_s,
                 "with restarts or --nnodes MIN:MAX: seconds to wait for MIN nodes (default 600)")
      ->check(CLI::PositiveNumber);
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
