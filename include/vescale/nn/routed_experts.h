// A mixture-of-experts layer's experts as a framework may run them (docs/moe.md). The module's
// own forward(x [N, dim], expert_ids [N, k], gates [N, k]) -> [N, dim] is the single-device
// computation: each token's gate-weighted sum of its k experts' outputs. Implementing this
// interface as well lets a framework run the same experts on a slice of them with its own
// dispatch (expert parallelism moves the tokens to the ranks that hold their experts): it needs
// the experts' math as a function of the weights it passes, and the routing policy. Plain
// libtorch; nothing here knows about parallelism.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace vescale::nn {

class RoutedExperts {
 public:
  virtual ~RoutedExperts() = default;
  virtual int64_t num_experts() const = 0;
  // 0: dropless (every assignment computed). Otherwise each expert takes at most
  // ceil(capacity_factor * tokens * k / E) assignments of a forward's tokens, first come (in
  // token order) first served; the rest add nothing (kernels/expert_routing.h).
  virtual double capacity_factor() const = 0;
  // The module's stacked expert weights, each [E, ...] with the expert index first.
  virtual std::vector<at::Tensor> expert_weights() const = 0;
  // Per weight, the dim that tensor parallelism may split, each rank then computing a partial
  // sum of the output (SwiGLU: w1's and w3's hidden rows, w2's hidden columns).
  virtual std::vector<int64_t> hidden_dims() const = 0;
  // The experts on rows grouped by expert: x [M, dim], counts[e] rows for the e-th expert of
  // `weights` (the tensors of expert_weights(), or slices of them along the expert dim).
  virtual at::Tensor run_experts(const at::Tensor& x, const std::vector<int64_t>& counts,
                                 const std::vector<at::Tensor>& weights) const = 0;
};

}  // namespace vescale::nn
