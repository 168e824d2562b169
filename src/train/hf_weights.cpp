#include "vescale/train/hf_weights.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "vescale/models/model.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::train {

namespace fs = std::filesystem;

std::map<std::string, at::Tensor> map_hf_weights(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(std::ifstream(index));
    } catch (const nlohmann::json::exception& e) {
      VESCALE_FAIL("model.init_from: ", index.string(), " is not valid JSON: ", e.what());
    }
    VESCALE_CHECK(j.contains("weight_map") && j["weight_map"].is_object(),
                  "model.init_from: ", index.string(), " has no weight_map object");
    std::set<std::string> names;
    for (const auto& [k, v] : j["weight_map"].items()) names.insert(v.get<std::string>());
    for (const auto& n : names) files.push_back((fs::path(dir) / n).string());
  } else {
    VESCALE_CHECK(fs::exists(single), "model.init_from: ", dir,
                  " has neither model.safetensors nor model.safetensors.index.json");
    files.push_back(single.string());
  }
  models::StateDict all;
  for (const auto& f : files) {
    VESCALE_CHECK(fs::exists(f), "model.init_from: ", f, " (named by the index) is missing");
    for (auto& [k, t] : checkpoint::map_safetensors(f)) {
      VESCALE_CHECK(!all.count(k), "model.init_from: weight '", k, "' is in two files of ", dir);
      all.emplace(k, std::move(t));
    }
  }
  return all;
}

void load_hf_weights(const std::string& dir, const Model& model, const ModelConfig& config) {
  const auto& builder = models::spec(config.type);
  VESCALE_CHECK(builder.from_hf, "model.init_from: model.type '", config.type,
                "' has no Hugging Face adapter");
  const models::StateDict ours = builder.from_hf(map_hf_weights(dir), *config.options);
  c10::NoGradGuard no_grad;
  std::vector<std::string> missing;
  int64_t copied = 0;
  for (const auto& item : model.module->named_parameters()) {
    const at::Tensor& p = item.value();
    const bool dt = dtensor::is_dtensor(p);
    at::Tensor local = dt ? dtensor::to_local(p) : p;
    if (local.is_meta()) continue;  // another pipeline stage's
    auto it = ours.find(item.key());
    if (it == ours.end()) {
      missing.push_back(item.key());
      continue;
    }
    at::Tensor src = it->second;
    const std::vector<int64_t> global = dt ? dtensor::spec_of(p).shape : p.sizes().vec();
    VESCALE_CHECK(src.sizes().vec() == global, "model.init_from: weight '", item.key(), "' is ",
                  src.sizes(), " in ", dir, " but ", at::IntArrayRef(global),
                  " here; the model config differs from its config.json");
    if (dt) {
      const auto offsets = dtensor::spec_of(p).local_offset();
      for (int64_t d = 0; d < src.dim(); ++d) src = src.narrow(d, offsets[d], local.size(d));
    }
    local.copy_(src);
    ++copied;
  }
  VESCALE_CHECK(missing.empty(), "model.init_from: ", dir, " has no weight for ", missing.size(),
                " parameters, e.g. '", missing.empty() ? "" : missing.front(), "'");
  log::info("model.init_from: " + std::to_string(copied) + " weights from " + dir);
}

}  // namespace vescale::train
