// Activation checkpointing: a wrapped block keeps only its inputs during forward (it runs
// without building a graph) and recomputes its forward during backward. The random-number
// state of forward time (vescale::random and libtorch's generators) and the autocast state are
// restored for the recompute, so dropout masks replay exactly and gradients equal the
// unwrapped model's.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace vescale::train {

using BlockForward = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Runs forward(inputs) checkpointed. Like PyTorch's reentrant checkpoint, parameters inside
// get gradients only when some input requires grad (true for every transformer block after
// the embedding).
at::Tensor checkpoint(const std::vector<at::Tensor>& inputs, const BlockForward& forward);

// Wraps every submodule of `root` whose FQN matches `pattern` ('*' = one name component, e.g.
// "h.*") through its models::ForwardHooks::around, keeping hooks already installed on it.
// Returns how many modules it wrapped; zero is an error naming the pattern.
int enable_activation_checkpointing(torch::nn::Module& root, const std::string& pattern);

}  // namespace vescale::train
