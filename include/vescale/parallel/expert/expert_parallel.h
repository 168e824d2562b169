// The mixture-of-experts boundary and expert parallelism (docs/moe.md).
//
// A model's experts module (one that implements nn::RoutedExperts) is called with its tokens,
// their chosen experts and gates, all row-sharded DTensors. On a mesh of several ranks the
// boundary takes over that call: each rank groups its own tokens by expert and runs the
// experts on its local shards of their weights, so no rank computes another's tokens. With the
// plan's "moe" entry naming an `ep` mesh dim (the experts' weights Shard(0) on it, the tokens
// sharded over it too), the tokens go to the ranks that hold their experts:
//   1. per-expert counts exchanged (one all-to-all of E integers);
//   2. tokens moved with one uneven all-to-all, then permuted to expert-major order;
//   3. all local experts in one grouped matmul per weight (kernels/grouped_mm.h);
//   4. permuted back, returned with the reverse all-to-all, combined per token in a fixed order.
// Both all-to-alls are differentiable (backward is the reverse exchange). Every rank joins
// every collective, forward and backward, also with zero tokens. Capacity drops (the module's
// capacity_factor) follow the single-device rule over the global batch: ranks learn how many
// assignments of each expert come before theirs from one all-gather of the counts.
//
// Mesh dims fall into four kinds, from the placements: tokens sharded and weights Replicate
// (data: weight gradients come out Partial, reduced by the gradient reducer), the ep dim,
// tokens Replicate and weights sharded along their hidden dim (expert tensor parallelism: the
// output is Partial), and both Replicate.
#pragma once
#include <cstdint>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel::expert {

// Installs the boundary on every nn::RoutedExperts module of `model` (with the plan's moe entry
// for it, if any). parallel::parallelize (parallel/parallelize.h) does this itself; returns
// how many modules got one. Throws when a moe entry's module is not a RoutedExperts.
int install_moe_boundaries(torch::nn::Module& model, const plan::Plan& plan,
                           const mesh::DeviceMesh& mesh);

// What the boundaries did in this process, for tests, metrics and benchmarks.
struct DispatchStats {
  int64_t dispatches = 0;    // boundary forwards (with or without an ep dim)
  int64_t all_to_alls = 0;   // token all-to-alls, forward and backward (counts excluded)
  int64_t rows_sent = 0;     // token rows this rank sent to other ranks (forward, both ways)
  int64_t bytes_sent = 0;    // their bytes
  int64_t dropped = 0;       // assignments dropped by the capacity rule (this rank's tokens)
};
DispatchStats dispatch_stats();
void reset_dispatch_stats();

}  // namespace vescale::parallel::expert
