#include "vescale/models/model.h"

#include <map>

namespace vescale::models {

namespace {
std::map<std::string, ModelBuilder>& builders() {
  static std::map<std::string, ModelBuilder> b;
  return b;
}
}  // namespace

void register_builder(ModelBuilder b) {
  auto& all = builders();
  VESCALE_CHECK(!all.count(b.type), "model registry: a builder for '", b.type,
                "' is registered twice");
  all.emplace(b.type, std::move(b));
}

const ModelBuilder& builder(const std::string& type) {
  auto& all = builders();
  auto it = all.find(type);
  VESCALE_CHECK(it != all.end(), "model.type: ", unknown_type_message(type),
                " (no builder registered)");
  return it->second;
}

}  // namespace vescale::models
