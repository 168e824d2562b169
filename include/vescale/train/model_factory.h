// Models from the config, through the model registry (models/registry.h, models/model.h): build
// one, or describe one without memory (built on the meta device: real names and shapes, no
// storage), for dry runs of models far larger than this machine.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vescale/models/model.h"  // models/: the registry's builders
#include "vescale/train/config.h"

namespace torch::nn {
class Module;
}

namespace vescale::train {

using ParamShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// What the trainer drives (models/model.h): the module, forward, init, aux loss, blocks.
using Model = models::Model;

// Builds and initializes the model on the CPU (init uses libtorch's generator, so seed it).
Model build_model(const ModelConfig& config);

// Every parameter's name and shape, in named_parameters() order, from a meta-device build.
ParamShapes parameter_shapes(const ModelConfig& config);
// The same of a built module.
ParamShapes parameter_shapes(const torch::nn::Module& module);
int64_t parameter_count(const ParamShapes& shapes);

// Training FLOPs per token: 6 x the parameters that multiply (embedding lookups don't; for
// Mixtral only top_k of the experts run) plus attention's 12 x layers x dim x seq_len.
double flops_per_token(const ModelConfig& config, int64_t seq_len);

// The model's buffers that are state (Model::state_buffers' patterns), by name: saved and loaded
// with the weights, copied to the sampler.
std::vector<std::pair<std::string, at::Tensor>> state_buffers(const Model& model);


}  // namespace vescale::train
