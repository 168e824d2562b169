#include "vescale/train/load_model.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "vescale/common/check.h"
#include "vescale/train/hf_convert.h"
#include "vescale/train/hf_weights.h"

namespace vescale::train {

void copy_weights(const Model& model, const std::map<std::string, at::Tensor>& weights,
                  const std::string& source) {
  c10::NoGradGuard no_grad;
  std::set<std::string> used;
  auto take = [&](const std::string& name, at::Tensor& target) {
    auto it = weights.find(name);
    VESCALE_CHECK(it != weights.end(), source, ": no weight '", name, "' for the model");
    VESCALE_CHECK(it->second.sizes() == target.sizes(), source, ": '", name, "' has shape ",
                  it->second.sizes(), ", the model's is ", target.sizes());
    target.copy_(it->second);
    used.insert(name);
  };
  for (auto& item : model.module->named_parameters()) take(item.key(), item.value());
  for (auto& item : model.module->named_buffers())
    if (weights.count(item.key())) take(item.key(), item.value());  // state buffers (expert bias)
  for (const auto& [name, t] : weights)
    VESCALE_CHECK(used.count(name), source, ": weight '", name,
                  "' is not in the model; is model.* the one it was saved with?");
}

LoadedModel load_checkpoint_model(const std::string& checkpoint) {
  auto [folder, config, weights] = read_checkpoint_weights(checkpoint, "generate");
  LoadedModel out{config, build_model(config.model)};
  copy_weights(out.model, weights, folder);
  return out;
}

LoadedModel load_hf_model(const std::string& dir) {
  Config config = hf_folder_config(dir, "generate");
  LoadedModel out{config, build_model(config.model)};
  load_hf_weights(dir, out.model, config.model);
  return out;
}

}  // namespace vescale::train
