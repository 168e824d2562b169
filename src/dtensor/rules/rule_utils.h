// Internal: small helpers the rule files share.
#pragma once
#include <ATen/core/ivalue.h>

#include <vector>

#include "dtensor/propagation.h"

namespace vescale::dtensor::rules {

// Broadcast shape of several shapes (numpy rules).
std::vector<int64_t> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes);

// Normalizes a possibly negative dim for a tensor of `ndim` dims (0-d tensors accept 0 and -1).
int64_t wrap_dim(int64_t dim, int64_t ndim);

// The dims argument of a reduction: an int list, possibly empty or None, meaning all dims.
std::vector<int64_t> reduce_dims(const c10::IValue& v, int64_t ndim);

// This rank's shard shape of a global `shape` under `placements`.
std::vector<int64_t> local_shape(const mesh::DeviceMesh& mesh, const Placements& placements,
                                 const std::vector<int64_t>& shape);

// Rough bytes moved to bring a tensor from `have` to `want` on mesh dim `m` (0 for local moves).
double redistribute_cost(const DTensorSpec& spec, const Placement& have, const Placement& want);

// Replaces the int-list argument at `arg_index` by `sizes` before running the op locally.
std::function<void(torch::jit::Stack&)> run_with_sizes(const c10::OperatorHandle& op, size_t n_args,
                                                       size_t arg_index,
                                                       std::vector<int64_t> sizes);

}  // namespace vescale::dtensor::rules
