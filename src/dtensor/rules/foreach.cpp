// _foreach_* ops (the optimizers' fused updates): element j of every list takes the
// placements of element j of the first list; tensor scalars are Replicate. Partials are
// reduced, since the updates are not linear in general.
#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

Strategy foreach_rule(const OpCall& call) {
  const auto& args = call.op.schema().arguments();
  const int64_t nm = call.mesh_ndim();
  // Element j of the first list, and its spec index.
  std::vector<int64_t> first;
  for (size_t k = 0; k < call.spec_arg.size(); ++k)
    if (call.spec_arg[k] == 0) first.push_back(static_cast<int64_t>(k));
  std::vector<Placements> target;
  for (auto k : first) {
    Placements p = call.specs[k].placements;
    for (auto& q : p)
      if (q.is_partial()) q = Placement::replicate();
    target.push_back(p);
  }
  Strategy st;
  st.inputs.assign(call.specs.size(), replicate_all(nm));
  std::vector<size_t> seen(args.size(), 0);
  for (size_t k = 0; k < call.spec_arg.size(); ++k) {
    const size_t a = call.spec_arg[k];
    const size_t j = seen[a]++;
    const bool is_list = args[a].type()->kind() == c10::TypeKind::ListType;
    if (is_list && j < target.size() && call.specs[k].shape == call.specs[first[j]].shape)
      st.inputs[k] = target[j];
  }
  bool returns_list = false;
  for (auto& r : call.op.schema().returns())
    returns_list |= r.type()->kind() == c10::TypeKind::ListType;
  if (returns_list) {
    st.outputs = {replicate_all(nm)};
    st.element_outputs = target;
    for (auto k : first) st.element_shapes.push_back(call.specs[k].shape);
  }
  return st;
}

}  // namespace

void register_foreach_rules() {
  // Every aten::_foreach_* overload, registered by base name.
  for (const auto& name : c10::Dispatcher::singleton().getAllOpNames())
    if (name.name.rfind("aten::_foreach_", 0) == 0) register_rule(name.name, foreach_rule);
}

}  // namespace vescale::dtensor
