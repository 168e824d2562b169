// The optimizer interface the trainer drives: AdamW (optim/adamw.h) and ZeRO
// (parallel/zero_optimizer.h) implement it, so the loop and the checkpoints need no branch on which
// one runs. State goes in and out of checkpoints under AdamW's names ("<param>.exp_avg",
// "<param>.exp_avg_sq", "<param>.step"), whatever the implementation keeps inside, so their
// checkpoints load into each other on any mesh.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "vescale/dtensor/tensor_box.h"

namespace vescale::optim {

// What an optimizer saves, or asks to be filled on load: whole (plain or DTensor) tensors by
// name, and boxes of tensors that only this rank knows (ZeRO's flat slices).
struct OptimizerState {
  std::map<std::string, at::Tensor> tensors;
  std::vector<dtensor::TensorBox> pieces;
};

// The sum of squares of this optimizer's gradients -> the sum over every process that holds
// another part of the model (pipeline stages), so the norm is the whole model's.
using SumAcross = std::function<at::Tensor(const at::Tensor& sum_of_squares)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // For a model split across processes that this optimizer does not know of (a pipeline):
  // clip_grad_norm_ passes its sum of squares through `across` before the square root.
  void set_norm_across(SumAcross across) { norm_across_ = std::move(across); }

  virtual void set_lr(double lr) = 0;
  // After the gradients are reduced: the norm of the whole gradient however it is sharded
  // (a 0-dim fp32 tensor, equal on every rank, not read back), clipping to max_norm when > 0.
  virtual at::Tensor clip_grad_norm_(double max_norm) = 0;
  virtual void step() = 0;
  virtual void zero_grad() = 0;
  // The sum of squares of the parameter values this rank updates (its shards, its ZeRO slices),
  // a 0-dim fp32 tensor on their device: no communication, nothing read back. Undefined while
  // they do not exist yet (ZeRO 1/2 before the first step). Summed over the ranks it weighs
  // every parameter by its number of holders, a fixed weighting from step to step: what the
  // divergence guard compares across an update.
  virtual at::Tensor param_sum_of_squares() const = 0;

  // Checkpoints. Collective where the implementation needs it; every rank calls them in order.
  // The state to save now.
  virtual OptimizerState state_to_save() = 0;
  // False while the state's layout does not exist yet (ZeRO 1/2: until the first gradient
  // reduction); the caller loads then.
  virtual bool ready_to_load() const { return true; }
  // Targets to fill from a checkpoint holding `saved` (name -> global shape, the "optim/" entries
  // without that prefix); throws for state of a parameter this optimizer does not have. After
  // filling them, call loaded().
  virtual OptimizerState state_to_load(
      const std::map<std::string, std::vector<int64_t>>& saved) = 0;
  virtual void loaded() = 0;
  // Before the model's parameters are read or overwritten for a checkpoint: makes them whole
  // (ZeRO-3; released again at their next use). After overwriting: params_loaded().
  virtual void gather_params() {}
  virtual void params_loaded() {}

 protected:
  SumAcross norm_across_;
};

}  // namespace vescale::optim
