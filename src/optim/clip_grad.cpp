#include "vescale/optim/clip_grad.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::optim {

at::Tensor grad_sum_of_squares(const std::vector<at::Tensor>& params) {
  c10::NoGradGuard no_grad;
  at::Tensor sum_sq;
  for (const auto& p : params) {
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    at::Tensor s = g.to(at::kFloat).square().sum();
    sum_sq = sum_sq.defined() ? sum_sq.add(s) : s;
  }
  return sum_sq;
}

at::Tensor local_sum_of_squares(const std::vector<at::Tensor>& tensors,
                                const std::vector<double>& shares) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> locals;
  std::vector<double> weights;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    at::Tensor local = dtensor::is_dtensor(t) ? dtensor::to_local(t.detach()) : t.detach();
    if (local.is_meta() || local.numel() == 0) continue;
    locals.push_back(local.scalar_type() == at::kFloat ? local : local.to(at::kFloat));
    weights.push_back(shares.empty() ? 1.0 : shares.at(i));
  }
  if (locals.empty()) return {};
  at::Tensor squares = at::stack(at::_foreach_norm(locals, 2)).square();
  if (!shares.empty())
    squares = squares * at::tensor(weights, at::TensorOptions().dtype(at::kDouble))
                            .to(squares.options());
  return squares.sum();
}

int64_t holders(const at::Tensor& t) {
  if (!dtensor::is_dtensor(t)) return 1;
  const auto& spec = dtensor::spec_of(t);
  int64_t n = 1;
  for (size_t d = 0; d < spec.placements.size(); ++d)
    if (spec.placements[d].is_replicate()) n *= spec.mesh.size(spec.mesh.dim_names()[d]);
  return n;
}

at::Tensor clip_factor(const at::Tensor& norm, double max_norm) {
  return (max_norm / (norm + 1e-6)).clamp_max(1.0);
}

void scale_grads_(const std::vector<at::Tensor>& params, const at::Tensor& factor) {
  c10::NoGradGuard no_grad;
  for (const auto& p : params)
    if (p.grad().defined()) p.grad().mul_(factor.to(p.grad().scalar_type()));
}

at::Tensor clip_grad_norm_(const std::vector<at::Tensor>& params, double max_norm,
                           const std::function<at::Tensor(const at::Tensor&)>& across) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  bool plain_fp32 = true;
  for (const auto& p : params) {
    const at::Tensor& g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    plain_fp32 = plain_fp32 && (g.device().is_cpu() || g.device().is_cuda()) &&
                 g.scalar_type() == at::kFloat;
  }
  VESCALE_CHECK(!grads.empty(), "clip_grad_norm_: no parameter has a gradient; run backward first");
  if (plain_fp32) {
    // As torch::nn::utils::clip_grad_norm_: the norm of the per-tensor norms (one foreach
    // kernel), and one foreach scale.
    at::Tensor norm = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
    if (across) norm = across(norm.square()).sqrt();
    if (max_norm > 0) at::_foreach_mul_(grads, clip_factor(norm, max_norm));
    return norm;
  }
  // DTensors: each sum of squares is the global one (a Partial sum, reduced by the dispatcher).
  at::Tensor sum_sq = grad_sum_of_squares(params);
  at::Tensor norm = (across ? across(sum_sq) : sum_sq).sqrt();
  if (max_norm > 0) scale_grads_(params, clip_factor(norm, max_norm));
  return norm;
}

}  // namespace vescale::optim
