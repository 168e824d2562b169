// The bookkeeping of a dropless (or capacity-limited) mixture of experts on one device: group a
// layer's (token, choice) assignments by expert, and put the experts' outputs back in token order
// (docs/moe.md). Models use it for their single-device forward; expert parallelism uses the same
// functions on each rank's tokens, so both take the same path through the same ops.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace vescale::kernels {

struct ExpertGroups {
  // The assignments (token * k + choice) grouped by expert; inside a group in token order.
  at::Tensor order;             // [A] int64
  std::vector<int64_t> counts;  // [E] assignments per expert, summing to A
};

// expert_ids [N, k] (int64): the experts each token chose. Reads the counts to the host (the
// experts' matmuls need their sizes).
ExpertGroups group_by_expert(const at::Tensor& expert_ids, int64_t n_experts);

// The rows per expert a capacity factor allows: ceil(capacity_factor * tokens * k / E).
int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t n_experts);

// Keeps, of each expert's group, the assignments whose position in the expert's queue is below
// `capacity`, the queue holding `before[e]` earlier assignments (other ranks' tokens that come
// first in the batch; empty: none). The rest are dropped: they add nothing to their token.
ExpertGroups within_capacity(const ExpertGroups& groups, int64_t capacity,
                             const std::vector<int64_t>& before = {});

// y_grouped [A, d]: the expert outputs of groups.order's assignments, in that order. Returns
// [N, d]: each token's sum over its k choices of gate * output, in choice order (a fixed order,
// no atomics: the same bits on every run). Dropped assignments contribute zero. Differentiable
// in y_grouped and gates [N, k].
at::Tensor combine_by_token(const at::Tensor& y_grouped, const at::Tensor& order,
                            const at::Tensor& gates);

}  // namespace vescale::kernels
