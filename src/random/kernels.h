// Internal: fill a tensor with a region of the global random stream.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "vescale/random/philox.h"

namespace vescale::random {

// Fills `out` (contiguous) with elements [offset, offset + out.sizes()) of a global tensor of
// shape `global_shape`, drawn under (seed, base). CPU or CUDA by out's device.
void fill_region(at::Tensor& out, const std::vector<int64_t>& global_shape,
                 const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                 const DistParams& p);

void fill_region_cpu(at::Tensor& out, const std::vector<int64_t>& global_shape,
                     const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                     const DistParams& p);
void fill_region_cuda(at::Tensor& out, const std::vector<int64_t>& global_shape,
                      const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                      const DistParams& p);

// Reserves the blocks of one random op over `global_numel` elements: returns (seed, base) and
// advances the offset. Every rank must call it for every op, in the same order.
std::pair<uint64_t, uint64_t> reserve(int64_t global_numel);

}  // namespace vescale::random
