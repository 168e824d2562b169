// Internal: what the kernels' DTensor rules share (written against dtensor's public rule API).
#pragma once
#include "vescale/dtensor/dtensor_spec.h"

namespace vescale::kernels {

dtensor::Placements replicated(int64_t mesh_ndim);

// x's placements with Partial, and shards of dims >= `from_dim`, made Replicate: what a kernel
// that is independent along dims [0, from_dim) takes.
dtensor::Placements shards_below(const dtensor::DTensorSpec& x, int64_t from_dim);

// Partial over every mesh dim where `p` shards: a sum over the sharded rows (weight gradients).
dtensor::Placements partial_where_sharded(const dtensor::Placements& p);

}  // namespace vescale::kernels
