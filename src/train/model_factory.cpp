#include "vescale/train/model_factory.h"

#include <torch/nn/module.h>

#include "vescale/models/shared/meta_device.h"
#include "vescale/models/model.h"
#include "vescale/plan/plan.h"

namespace vescale::train {
ParamShapes parameter_shapes(const ModelConfig& config) {
  // Built on the meta device: the real module's names and shapes, and no memory.
  Model m;
  {
    models::MetaDeviceScope meta;
    m = build_model(config);
  }
  return parameter_shapes(*m.module);
}

ParamShapes parameter_shapes(const torch::nn::Module& module) {
  ParamShapes shapes;
  for (const auto& item : module.named_parameters())
    shapes.emplace_back(item.key(), item.value().sizes().vec());
  return shapes;
}

int64_t parameter_count(const ParamShapes& shapes) {
  int64_t n = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    n += k;
  }
  return n;
}

double flops_per_token(const ModelConfig& config, int64_t seq_len) {
  const auto& b = models::spec(config.type);
  double matmul = 0;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    if (shape.size() < 2) continue;  // norms and biases
    double k = 1;
    for (int64_t d : shape) k *= static_cast<double>(d);
    matmul += k * b.matmul_fraction(*config.options, name, shape);
  }
  const auto layers = static_cast<double>(config.options->n_layers());
  const auto dim = static_cast<double>(config.options->dim());
  return 6.0 * matmul + 12.0 * layers * dim * static_cast<double>(seq_len);
}

Model build_model(const ModelConfig& config) {
  return models::spec(config.type).build(*config.options);
}

std::vector<std::pair<std::string, at::Tensor>> state_buffers(const Model& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.module->named_buffers())
    for (const auto& pattern : model.state_buffers)
      if (plan::fqn_match(pattern, item.key())) {
        out.emplace_back(item.key(), item.value());
        break;
      }
  return out;
}

}  // namespace vescale::train
