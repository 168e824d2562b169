// Activation checkpointing, a memory transform of the model beside ZeRO-3's
// (sharded_parameters.h): a wrapped block keeps only its inputs during forward (it runs
// without building a graph) and recomputes its forward during backward. The random-number
// state of forward time (vescale::random and libtorch's generators) and the autocast state are
// restored for the recompute, so dropout masks replay exactly and gradients equal the
// unwrapped model's.
//
// Side outputs: a block may leave a tensor in a module member that code after the forward
// reads with autograd (Mixtral's router logits, which the load-balancing loss reads). A
// checkpointed block computes it without a graph; listed as a side output, it becomes an
// extra output of the checkpoint (so the member then has a grad_fn, the loss built on it is
// the non-checkpointed one, and it is counted once), and the gradient that output receives
// joins the block's own in the recompute's backward, through the recomputed member. So
// gradients equal the unwrapped model's.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "vescale/nn/module_hooks.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel {

using BlockForward = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
// The members a block's forward writes that are read later with autograd (see above).
using SideOutputs = std::function<std::vector<at::Tensor*>(torch::nn::Module& block)>;

// Runs forward(inputs) checkpointed. Like PyTorch's reentrant checkpoint, parameters inside
// get gradients only when some input requires grad (true for every transformer block after
// the embedding). `side` are the tensors forward writes (read after it returns).
at::Tensor checkpoint(const std::vector<at::Tensor>& inputs, const BlockForward& forward,
                      const std::vector<at::Tensor*>& side = {});

// Checkpoints every submodule of `root` whose FQN matches `pattern` (nn/block_pattern.h: '*' is
// one name component, e.g. "h.*"): a link in each one's hook chain (nn::HookSlot::Checkpoint; the others stay).
// Returns the links' handles, one per block: checkpointing lasts while they live. No match is
// an error naming the pattern.
[[nodiscard]] std::vector<nn::HookHandle> enable_activation_checkpointing(
    torch::nn::Module& root, const std::string& pattern, const SideOutputs& side_outputs = {});

}  // namespace vescale::parallel
