// The optimizer interface the trainer drives: AdamW (optim/adamw.h) and ZeRO's ShardedAdamW
// (parallel/sharded_adamw.h) implement it, so the loop and the checkpoints need no branch on which
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
// Fills the targets an optimizer asks for from a checkpoint (load_state_dict).
using ReadState = std::function<void(OptimizerState& targets)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  virtual void set_lr(double lr) = 0;
  // After the gradients are reduced: the norm of the whole gradient however it is sharded
  // (a 0-dim fp32 tensor, equal on every rank, not read back), clipping to max_norm when > 0.
  // For a model split across processes this optimizer does not know of (a pipeline), `across`
  // (when set) sums the sum of squares over them before the square root.
  virtual at::Tensor clip_grad_norm_(double max_norm, const SumAcross& across) = 0;
  virtual void step() = 0;
  virtual void zero_grad() = 0;
  // This rank's share of the parameters' sum of squares (its shards, its ZeRO slices), each
  // value divided by the number of ranks that hold it, so that the sum over every rank is the
  // whole model's (weights tied across pipeline stages count once per stage): a 0-dim fp32
  // tensor on their device, no communication, nothing read back.
  virtual at::Tensor param_sum_of_squares() const = 0;

  // Checkpoints. Collective where the implementation needs it; every rank calls them in order.
  // The state to save now.
  virtual OptimizerState state_dict() = 0;
  // Loads a checkpoint holding `saved` (name -> global shape, its "optim/" entries without that
  // prefix; empty for a checkpoint without optimizer state): makes the targets, hands them to
  // `read` to fill, then takes them. Throws for state of a parameter this optimizer does not
  // have. Load the parameters first or in the same read: an optimizer that keeps copies of
  // their values (ZeRO's fp32 slices) rereads them.
  virtual void load_state_dict(const std::map<std::string, std::vector<int64_t>>& saved,
                               const ReadState& read) = 0;
};

}  // namespace vescale::optim
