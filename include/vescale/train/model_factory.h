// Models from the config: build one (models::GPT, Llama, Mixtral), or describe one without
// memory (built on the meta device: real names and shapes, no storage), for dry runs of models
// far larger than this machine.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vescale/train/config.h"

namespace torch::nn {
class Module;
}

namespace vescale::train {

using ParamShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

struct Model {
  std::shared_ptr<torch::nn::Module> module;
  // tokens [B, T] (int64) -> logits [B, T, vocab]
  std::function<at::Tensor(const at::Tensor&)> forward;
  // Reruns the model's own initialisation in place (after parallelize made the parameters
  // DTensors, it goes through the consistent RNG).
  std::function<void()> init;
  // A loss term the model adds (Mixtral's load balancing), or an empty function.
  std::function<at::Tensor()> aux_loss;
  // The transformer blocks, as module FQN patterns with '*' matching one name component
  // ("h.*"): activation checkpointing wraps each of them.
  std::string block_pattern;
  // The tensors a block's forward leaves in its members for code after the forward that
  // needs their gradients (Mixtral's router logits, read by the aux loss): activation
  // checkpointing returns them from the checkpoint (train/activation_checkpoint.h).
  std::function<std::vector<at::Tensor*>(torch::nn::Module& block)> block_side_outputs;
};

// Builds and initializes the model on the CPU (init uses libtorch's generator, so seed it).
Model build_model(const ModelConfig& config);

// Every parameter's name and shape, in named_parameters() order, from a meta-device build.
ParamShapes parameter_shapes(const ModelConfig& config);
int64_t parameter_count(const ParamShapes& shapes);

// Training FLOPs per token: 6 x the parameters that multiply (embedding lookups don't; for
// Mixtral only top_k of the experts run) plus attention's 12 x layers x dim x seq_len.
double flops_per_token(const ModelConfig& config, int64_t seq_len);

// FQN match where '*' is one whole name component: "h.*" matches "h.3" but not "h.3.attn".
bool component_match(const std::string& pattern, const std::string& fqn);

}  // namespace vescale::train
