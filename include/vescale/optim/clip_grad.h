// Gradient clipping over the global norm of all gradients. Plain gradients: the per-tensor
// norms from one foreach kernel, then their norm (as torch::nn::utils::clip_grad_norm_), and
// one foreach scale. DTensor gradients: the sum of squares of each, added, then the square
// root; each sum is a cross-rank reduction, so the result is the norm of the whole
// (unsharded) gradient.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace vescale::optim {

// Scales every gradient by min(1, max_norm / (norm + 1e-6)) (torch's formula) and returns the
// norm before clipping as a 0-dim fp32 tensor (nothing read back to the host). Parameters
// without a gradient are skipped; max_norm <= 0 only computes the norm. `across`, when given,
// maps the sum of squares to the sum over other processes' parts of the model (pipeline
// stages) before the square root.
at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                           const std::function<at::Tensor(const at::Tensor&)>& across = {});

// The pieces, for optimizers that hold part of the gradient elsewhere (ZeRO): the sum of
// squares of the gradients (fp32, a DTensor for DTensor grads; undefined if none has one),
// the clip factor min(1, max_norm / (norm + 1e-6)), and every gradient times a factor.
at::Tensor grad_sum_of_squares(const std::vector<at::Tensor>& params);
// The sum of squares of the tensors' local values (a DTensor's shard; meta tensors skipped), a
// 0-dim fp32 tensor with no communication; undefined when there are none. With `shares`, tensor
// i's sum counts shares[i] times (1 / its number of holders: the sum over ranks is then the
// whole model's).
at::Tensor local_sum_of_squares(const std::vector<at::Tensor>& tensors,
                                const std::vector<double>& shares = {});
// How many ranks hold each value of `t`: for a DTensor the product of the mesh dims it is
// Replicate on; 1 for a plain tensor.
int64_t holders(const at::Tensor& t);
at::Tensor clip_factor(const at::Tensor& norm, double max_norm);
void scale_grads_(const std::vector<at::Tensor>& params, const at::Tensor& factor);

}  // namespace vescale::optim
