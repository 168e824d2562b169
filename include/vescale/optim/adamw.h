// AdamW with decoupled weight decay, the arithmetic of torch::optim::AdamW. Parameters are
// updated by libtorch's fused kernel (at::_fused_adamw_, one call per group; equal to
// torch::optim::AdamW up to rounding order, 1 ulp): plain CPU/CUDA tensors directly, DTensors
// on their local shards, since the update is elementwise and the state tensors take the
// parameters' placements (zeros_like). A DTensor whose gradient is placed otherwise (and
// every parameter with fused=false) takes a loop of aten ops (adamw_update), bitwise
// torch::optim::AdamW's, which the dispatcher shards. No value is read back to the host.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "vescale/optim/optimizer.h"

namespace vescale::optim {

using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

struct ParamGroup {
  NamedParams params;
  double weight_decay = 0.0;
};

// nanoGPT's convention: tensors with 2+ dims (matmul weights, embeddings) decay; biases and
// norm weights (1-D) don't.
std::vector<ParamGroup> decay_groups(const NamedParams& params, double weight_decay);

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Parameters (DTensors by their shards) through at::_fused_adamw_ (within 1 ulp of the loop);
  // false: the op-by-op loop for every parameter, bitwise torch::optim::AdamW.
  bool fused = true;
};

// One AdamW update of `p` in place (its moments too), the arithmetic of AdamW::step; `step`
// counts from 1. ZeRO calls it on flat slices of parameters.
void adamw_update(at::Tensor& p, const at::Tensor& grad, at::Tensor& exp_avg,
                  at::Tensor& exp_avg_sq, int64_t step, const AdamWOptions& options,
                  double weight_decay);

// Zero targets for the AdamW entries of `saved` (checkpoint names "<param>.<field>" -> global
// shape) of the parameters `want` accepts, in their parameters' placements (a "step" is an int64
// scalar). Throws naming an entry whose parameter is not in `params`.
std::map<std::string, at::Tensor> adamw_state_targets(
    const NamedParams& params, const std::map<std::string, std::vector<int64_t>>& saved,
    const std::function<bool(const std::string&)>& want);

class AdamW : public Optimizer {
 public:
  // `clip_order`: the parameters in the order clip_grad_norm_ sums their norms (the model's
  // order, so the norm's rounding does not depend on the grouping); empty: the groups' order.
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options,
        std::vector<at::Tensor> clip_order = {});

  // One update of every parameter that has a gradient; one without (grad undefined) is left
  // alone and its step count does not advance, as in torch.
  void step() override;
  // Drops the gradients (set_to_none), so the next backward writes fresh ones.
  void zero_grad() override;
  // Global-norm clipping over every parameter (optim/clip_grad.h).
  at::Tensor clip_grad_norm_(double max_norm, const SumAcross& across = {}) override;
  at::Tensor param_sum_of_squares() const override;

  void set_lr(double lr) override { options_.lr = lr; }
  double lr() const { return options_.lr; }
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // For checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq" and "<param>.step" (an int64
  // scalar) for every parameter that has state. Loading checks names and shapes.
  std::map<std::string, at::Tensor> state_tensors() const;
  void load_state_tensors(const std::map<std::string, at::Tensor>& state);

  // Optimizer's checkpoint calls, by state_tensors() and load_state_tensors().
  OptimizerState state_dict() override { return {state_tensors(), {}}; }
  void load_state_dict(const std::map<std::string, std::vector<int64_t>>& saved,
                       const ReadState& read) override;

 private:
  struct State {
    int64_t step = 0;
    at::Tensor exp_avg, exp_avg_sq;
    at::Tensor step_t;  // float copy of `step` for the fused kernel (on the local shard's device)
  };
  std::vector<ParamGroup> groups_;
  AdamWOptions options_;
  std::map<std::string, State> state_;
  std::vector<at::Tensor> clip_order_;
};

}  // namespace vescale::optim
