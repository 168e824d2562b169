// Internal: moving a local shard between placements of the same global tensor.
#pragma once
#include <ATen/core/Tensor.h>

#include "vescale/dtensor/dtensor_spec.h"

namespace vescale::dtensor {

// The local shard of the same global tensor under `dst`. Never modifies `local`.
// Collectives run on the mesh's sub-groups, one mesh dim at a time (docs/dtensor.md):
// unshard (all-gather, or all-to-all for Shard(i)->Shard(j)) from the innermost mesh dim out,
// then resolve partials (all-reduce, or reduce-scatter straight into a shard), then shard
// (local slices) from the outermost mesh dim in.
at::Tensor redistribute_local(const at::Tensor& local, const DTensorSpec& src,
                              const Placements& dst);

// Counts `label: src -> dst` when the redistribution log is on (set_redistribution_log).
void log_redistribution(const char* label, int64_t arg, const Placements& src,
                        const Placements& dst);

}  // namespace vescale::dtensor
