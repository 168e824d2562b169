#include "kernels/kernel_rules.h"

namespace vescale::kernels {

using dtensor::Placement;
using dtensor::Placements;

Placements replicated(int64_t mesh_ndim) { return Placements(mesh_ndim, Placement::replicate()); }

Placements shards_below(const dtensor::DTensorSpec& x, int64_t from_dim) {
  Placements p = x.placements;
  for (auto& q : p)
    if (q.is_partial() || (q.is_shard() && q.dim >= from_dim)) q = Placement::replicate();
  return p;
}

Placements partial_where_sharded(const Placements& p) {
  Placements out(p.size(), Placement::replicate());
  for (size_t m = 0; m < p.size(); ++m)
    if (p[m].is_shard()) out[m] = Placement::partial();
  return out;
}

}  // namespace vescale::kernels
