#include "vescale/models/model.h"

#include <map>

namespace vescale::models {

namespace {
std::map<std::string, ModelSpec>& specs() {
  static std::map<std::string, ModelSpec> all;
  return all;
}
}  // namespace

void register_spec(ModelSpec s) {
  auto& all = specs();
  VESCALE_CHECK(!all.count(s.type), "model registry: a spec for '", s.type,
                "' is registered twice");
  all.emplace(s.type, std::move(s));
}

const ModelSpec& spec(const std::string& type) {
  auto& all = specs();
  auto it = all.find(type);
  VESCALE_CHECK(it != all.end(), "model.type: ", unknown_type_message(type),
                " (no spec registered)");
  return it->second;
}

const ModelSpec* find_spec_by_hf_type(const std::string& model_type) {
  for (const auto& [type, s] : specs())
    if (s.hf_type() == model_type) return &s;
  return nullptr;
}

}  // namespace vescale::models
