#include "vescale/optim/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "vescale/common/check.h"
#include "vescale/optim/clip_grad.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::optim {

std::vector<ParamGroup> decay_groups(const NamedParams& params, double weight_decay) {
  ParamGroup decay{{}, weight_decay}, no_decay{{}, 0.0};
  for (const auto& [name, p] : params)
    (p.dim() >= 2 ? decay : no_decay).params.emplace_back(name, p);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options,
             std::vector<at::Tensor> clip_order)
    : groups_(std::move(groups)), options_(options), clip_order_(std::move(clip_order)) {
  for (const auto& g : groups_)
    for (const auto& [name, p] : g.params) {
      VESCALE_CHECK(p.defined() && p.is_floating_point(), "AdamW: parameter '", name,
                    "' must be a floating-point tensor");
      VESCALE_CHECK(state_.emplace(name, State{}).second, "AdamW: parameter name '", name,
                    "' appears twice; each parameter must be in exactly one group");
    }
}

void adamw_update(at::Tensor& p, const at::Tensor& grad, at::Tensor& exp_avg,
                  at::Tensor& exp_avg_sq, int64_t step, const AdamWOptions& o,
                  double weight_decay) {
  const double lr = o.lr, b1 = o.beta1, b2 = o.beta2;
  // Decoupled weight decay: shrink the weights, apart from the gradient's moments.
  if (weight_decay != 0.0) p.mul_(1.0 - lr * weight_decay);
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step));
  exp_avg.mul_(b1).add_(grad, 1.0 - b1);
  exp_avg_sq.mul_(b2).addcmul_(grad, grad, 1.0 - b2);
  at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias2)).add_(o.eps);
  p.addcdiv_(exp_avg, denom, -lr / bias1);
}

namespace {
// What at::_fused_adamw_ updates for `t`: a plain CPU/CUDA tensor itself; a DTensor its local
// shard (AdamW is elementwise, and the gradient and the moments share the parameter's
// placements, so the shards line up). Undefined where the kernel can't take it.
at::Tensor fused_view(const at::Tensor& t) {
  const at::Tensor local = dtensor::is_dtensor(t) ? dtensor::to_local(t) : t;
  return local.device().is_cpu() || local.device().is_cuda() ? local : at::Tensor();
}

// Whether the fused kernel can take `t` (a gradient or a moment) with its parameter: the same
// dtype, and for a DTensor the same placements, so that the shards line up (a Partial or
// differently sharded gradient takes the op loop, whose dispatcher redistributes it).
bool same_layout(const at::Tensor& p, const at::Tensor& t) {
  if (t.scalar_type() != p.scalar_type() || dtensor::is_dtensor(p) != dtensor::is_dtensor(t))
    return false;
  if (!dtensor::is_dtensor(p)) return t.device() == p.device();
  const auto &ps = dtensor::spec_of(p), &ts = dtensor::spec_of(t);
  return ps.mesh == ts.mesh && ps.placements == ts.placements;
}
}  // namespace

void AdamW::step() {
  c10::NoGradGuard no_grad;
  for (auto& g : groups_) {
    std::vector<at::Tensor> ps, gs, ms, vs, steps;  // the group's fused part
    for (auto& [name, p] : g.params) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      State& s = state_.at(name);
      if (!s.exp_avg.defined()) {
        s.exp_avg = at::zeros_like(p, at::MemoryFormat::Preserve);
        s.exp_avg_sq = at::zeros_like(p, at::MemoryFormat::Preserve);
      }
      s.step += 1;
      if (options_.fused && same_layout(p, grad) && same_layout(p, s.exp_avg) &&
          same_layout(p, s.exp_avg_sq)) {
        if (at::Tensor local = fused_view(p); local.defined()) {
          // The kernel reads the step from a float tensor; kept in step with the host count.
          if (!s.step_t.defined())
            s.step_t =
                at::full({}, static_cast<double>(s.step - 1), local.options().dtype(at::kFloat));
          ps.push_back(local), gs.push_back(fused_view(grad)), ms.push_back(fused_view(s.exp_avg));
          vs.push_back(fused_view(s.exp_avg_sq)), steps.push_back(s.step_t);
          continue;
        }
      }
      adamw_update(p, grad, s.exp_avg, s.exp_avg_sq, s.step, options_, g.weight_decay);
    }
    if (ps.empty()) continue;
    const double lr = options_.lr, b1 = options_.beta1, b2 = options_.beta2;
    // Plain tensors: the same update in one kernel per group (what torch.optim.AdamW(fused=True)
    // runs): decay, moments by lerp, bias-corrected step; equal to the loop above up to
    // rounding order (1 ulp; tested against torch::optim::AdamW).
    at::_foreach_add_(steps, 1.0);
    at::_fused_adamw_(ps, gs, ms, vs, {}, steps, lr, b1, b2, g.weight_decay, options_.eps,
                      /*amsgrad=*/false,
                      /*maximize=*/false);
  }
}

void AdamW::zero_grad() {
  for (auto& g : groups_)
    for (auto& [name, p] : g.params) p.mutable_grad() = at::Tensor();
}

std::map<std::string, at::Tensor> AdamW::state_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, s] : state_) {
    if (!s.exp_avg.defined()) continue;
    out[name + ".exp_avg"] = s.exp_avg;
    out[name + ".exp_avg_sq"] = s.exp_avg_sq;
    out[name + ".step"] = at::scalar_tensor(s.step, at::kLong);
  }
  return out;
}

void AdamW::load_state_tensors(const std::map<std::string, at::Tensor>& state) {
  c10::NoGradGuard no_grad;
  size_t used = 0;
  for (auto& g : groups_) {
    for (auto& [name, p] : g.params) {
      State& s = state_.at(name);
      auto it = state.find(name + ".step");
      if (it == state.end()) {
        s = State{};
        continue;
      }
      auto m = state.find(name + ".exp_avg"), v = state.find(name + ".exp_avg_sq");
      VESCALE_CHECK(m != state.end() && v != state.end(), "AdamW state: parameter '", name,
                    "' has a step but no exp_avg/exp_avg_sq; the checkpoint is incomplete");
      VESCALE_CHECK(m->second.sizes() == p.sizes() && v->second.sizes() == p.sizes(),
                    "AdamW state: '", name, "' has shape ", m->second.sizes(),
                    " in the checkpoint but the parameter is ", p.sizes());
      s.step = it->second.item<int64_t>();  // host-side counter, read once at load
      s.exp_avg = at::empty_like(p).copy_(m->second);
      s.exp_avg_sq = at::empty_like(p).copy_(v->second);
      s.step_t = at::Tensor();  // the fused step's float copy of the count: remade at the next step
      used += 3;
    }
  }
  VESCALE_CHECK(used == state.size(), "AdamW state: the checkpoint holds ", state.size() - used,
                " entries for parameters this optimizer doesn't have (a different model?)");
}

std::map<std::string, at::Tensor> adamw_state_targets(
    const NamedParams& params, const std::map<std::string, std::vector<int64_t>>& saved,
    const std::function<bool(const std::string&)>& want) {
  std::map<std::string, at::Tensor> by_name(params.begin(), params.end()), out;
  c10::NoGradGuard no_grad;
  for (const auto& [key, shape] : saved) {
    const auto dot = key.rfind('.');
    auto p = dot == std::string::npos ? by_name.end() : by_name.find(key.substr(0, dot));
    VESCALE_CHECK(p != by_name.end(), "checkpoint: it has optimizer state '", key,
                  "', for a parameter this model does not have (a different model?)");
    if (!want(p->first)) continue;
    out[key] = key.substr(dot + 1) == "step" ? at::zeros({}, at::kLong) : at::zeros_like(p->second);
  }
  return out;
}

at::Tensor AdamW::param_sum_of_squares() const {
  std::vector<at::Tensor> all;
  std::vector<double> shares;
  for (const auto& g : groups_)
    for (const auto& [name, p] : g.params) {
      all.push_back(p);
      shares.push_back(1.0 / static_cast<double>(holders(p)));
    }
  return local_sum_of_squares(all, shares);
}

at::Tensor AdamW::clip_grad_norm_(double max_norm, const SumAcross& across) {
  if (clip_order_.empty())
    for (const auto& g : groups_)
      for (const auto& [name, p] : g.params) clip_order_.push_back(p);
  return optim::clip_grad_norm_(clip_order_, max_norm, across);
}

void AdamW::load_state_dict(const std::map<std::string, std::vector<int64_t>>& saved,
                            const ReadState& read) {
  NamedParams all;
  for (const auto& g : groups_) all.insert(all.end(), g.params.begin(), g.params.end());
  OptimizerState targets{adamw_state_targets(all, saved, [](const std::string&) { return true; }),
                         {}};
  read(targets);
  load_state_tensors(targets.tensors);
}

}  // namespace vescale::optim
