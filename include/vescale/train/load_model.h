// A model on this process from what a run left (one of our checkpoints) or a Hugging Face
// folder, with the config that describes it: for vescale-generate, the sampler of
// train.sample_every, and embedders.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

// A model to generate from on this process, with the config that describes it.
struct LoadedModel {
  Config config;
  Model model;
};
// From one of our checkpoints (a step folder, or a root holding `latest`), saved at any world
// size, pipeline or ZeRO stage: each tensor is read whole (resharded to one process).
LoadedModel load_checkpoint_model(const std::string& checkpoint);
// From a Hugging Face folder (config.json, model.safetensors or a sharded index).
LoadedModel load_hf_model(const std::string& dir);

// Copies `weights` (our names, whole tensors) into the model's parameters and state buffers;
// throws naming a missing or unexpected weight or a shape that differs.
void copy_weights(const Model& model, const std::map<std::string, at::Tensor>& weights,
                  const std::string& source);

}  // namespace vescale::train
