#include "vescale/models/registry.h"

#include <algorithm>
#include <map>

#include "vescale/common/suggest.h"

namespace vescale::models {

namespace {
std::map<std::string, ModelFamily>& families() {
  static std::map<std::string, ModelFamily> f;
  return f;
}
}  // namespace

void register_family(ModelFamily f) {
  auto& all = families();
  VESCALE_CHECK(!all.count(f.type), "model registry: model.type '", f.type,
                "' is registered twice");
  all.emplace(f.type, std::move(f));
}

std::vector<std::string> family_types() {
  std::vector<std::string> types;
  for (auto& [t, f] : families()) types.push_back(t);
  return types;
}

const ModelFamily* find_family(const std::string& type) {
  auto& all = families();
  auto it = all.find(type);
  return it == all.end() ? nullptr : &it->second;
}

std::string unknown_type_message(const std::string& type) {
  const auto types = family_types();
  std::string list;
  for (auto& t : types) list += (list.empty() ? "" : ", ") + t;
  const std::string guess = vescale::closest_match(type, types);
  return "'" + type + "' is not one of " + list +
         (guess.empty() ? std::string() : "; did you mean " + guess + "?");
}

std::unique_ptr<ModelOptions> default_options(const std::string& type) {
  const ModelFamily* f = find_family(type);
  VESCALE_CHECK(f, "model.type: ", unknown_type_message(type));
  return f->defaults();
}

}  // namespace vescale::models
