#include "dtensor/propagation.h"

#include <unordered_map>

#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {
std::unordered_map<std::string, Rule>& registry() {
  static std::unordered_map<std::string, Rule> r;
  return r;
}
}  // namespace

const c10::IValue& OpCall::arg(const char* n) const {
  const auto& a = op.schema().arguments();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name() == n) return args[i];
  VESCALE_FAIL("DTensor rule for ", name, ": the op has no argument '", n, "'");
}

bool OpCall::has_arg(const char* n) const {
  for (const auto& a : op.schema().arguments())
    if (a.name() == n) return true;
  return false;
}

int64_t OpCall::spec_index(size_t arg_index) const {
  for (size_t i = 0; i < spec_arg.size(); ++i)
    if (spec_arg[i] == arg_index) return static_cast<int64_t>(i);
  return -1;
}

bool OpCall::is_inplace() const {
  const auto& a = op.schema().arguments();
  return !a.empty() && a[0].alias_info() && a[0].alias_info()->isWrite();
}

size_t tensor_return_count(const c10::FunctionSchema& schema) {
  size_t n = 0;
  for (auto& r : schema.returns()) {
    auto k = r.type()->kind();
    if (k == c10::TypeKind::TensorType ||
        (k == c10::TypeKind::ListType &&
         r.type()->containedType(0)->kind() == c10::TypeKind::TensorType))
      ++n;
  }
  return n;
}

size_t OpCall::n_outputs() const { return tensor_return_count(op.schema()); }

void register_rule(const std::string& name, Rule rule) { registry()[name] = std::move(rule); }

const Rule* find_rule(const c10::OperatorHandle& op, const std::string& name) {
  auto& r = registry();
  if (auto it = r.find(name); it != r.end()) return &it->second;
  const std::string base = op.schema().name();
  if (auto it = r.find(base); it != r.end()) return &it->second;
  // Pointwise by tag; in-place variants (masked_fill_) are often untagged, so ask the
  // functional op (masked_fill) instead.
  bool pointwise = op.hasTag(at::Tag::pointwise);
  if (!pointwise && !base.empty() && base.back() == '_') {
    auto functional = c10::Dispatcher::singleton().findOp(
        c10::OperatorName(base.substr(0, base.size() - 1), op.schema().overload_name()));
    pointwise = functional && functional->hasTag(at::Tag::pointwise);
  }
  if (pointwise) {
    if (auto it = r.find("@pointwise"); it != r.end()) return &it->second;
  }
  return nullptr;
}

Placements replicate_all(int64_t mesh_ndim) {
  return Placements(mesh_ndim, Placement::replicate());
}

Strategy all_replicate(const OpCall& call, size_t n_outputs) {
  Strategy s;
  s.inputs.assign(call.specs.size(), replicate_all(call.mesh_ndim()));
  s.outputs.assign(n_outputs, replicate_all(call.mesh_ndim()));
  return s;
}

}  // namespace vescale::dtensor
