// Ops that copy, convert, fill or create tensors.
#include <ATen/ATen.h>
#include <c10/util/strides.h>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

// The output is the input, placements and all (clone, detach, alias, dtype casts).
Strategy same_as_input(const OpCall& call) {
  Strategy st;
  st.inputs = {call.specs[0].placements};
  for (size_t i = 1; i < call.specs.size(); ++i) st.inputs.push_back(call.specs[i].placements);
  st.outputs.assign(call.n_outputs(), call.specs[0].placements);
  st.output_shapes.assign(st.outputs.size(), call.specs[0].shape);
  return st;
}

// _to_copy: dtype casts stay DTensors. Moving to a real device would need every rank (the
// shards live on several), so printing or .to(kCPU) asks for the explicit, collective call.
Strategy to_copy(const OpCall& call) {
  const auto& device = call.arg("device");
  VESCALE_CHECK(device.isNone() || device.toDevice().type() == c10::DeviceType::PrivateUse1,
                "DTensor: cannot copy a DTensor to ", device.toDevice().str(),
                " (printing does this). Use "
                "full_tensor(t) (collective: every rank calls it) for the whole tensor, "
                "to_local(t) for this rank's "
                "shard, or dtensor::describe(t) for a one-line summary");
  return same_as_input(call);
}

// *_like: the shape and shard layout of the input, but fresh values, so never Partial.
Strategy like(const OpCall& call) {
  Strategy st;
  st.inputs = {call.specs[0].placements};
  Placements out = call.specs[0].placements;
  for (auto& p : out)
    if (p.is_partial()) p = Placement::replicate();
  st.outputs = {out};
  st.output_shapes = {call.specs[0].shape};
  return st;
}

// new_zeros/new_empty/new_full/new_ones: global sizes, so the result is Replicate.
Strategy new_factory(const OpCall& call) {
  Strategy st;
  st.inputs = {call.specs[0].placements};
  st.outputs = {replicate_all(call.mesh_ndim())};
  return st;
}

// new_empty_strided(self, size, stride): autograd makes a leaf's gradient with it
// (clone_obey_contract) at the leaf's own sizes and strides, then copies the gradient in. At
// those, the result takes self's layout, as empty_like: a replicated buffer would make the
// copy gather a sharded gradient. Other sizes are global, so Replicate.
Strategy new_empty_strided(const OpCall& call) {
  const auto& x = call.specs[0];
  const auto size = call.arg("size").toIntVector(), stride = call.arg("stride").toIntVector();
  if (size != x.shape || c10::IntArrayRef(stride) != c10::contiguous_strides(size))
    return new_factory(call);
  Strategy st = like(call);
  const size_t n_args = call.op.schema().arguments().size();
  st.local_fn = [n_args](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, n_args);
    const at::Tensor self = a[0].toTensor();
    const auto dtype = a[3].toOptional<at::ScalarType>();
    auto out = at::empty(self.sizes(), self.options().dtype(dtype.value_or(self.scalar_type())));
    torch::jit::drop(stack, n_args);
    stack.emplace_back(std::move(out));
  };
  return st;
}

// copy_(self, src): src takes self's placements.
Strategy copy_into(const OpCall& call) {
  Strategy st;
  st.inputs = {call.specs[0].placements, call.specs[0].placements};
  st.outputs = {call.specs[0].placements};
  return st;
}

// fill_ / zero_ in place: zero is fine for any placement; a value on a Partial would be
// counted once per rank.
Strategy fill(const OpCall& call, bool zero) {
  for (auto& p : call.specs[0].placements)
    VESCALE_CHECK(zero || !p.is_partial(), "DTensor: ", call.name,
                  " on a Partial tensor would count the value once per "
                  "rank; redistribute it to Replicate first");
  Strategy st;
  st.inputs.clear();
  for (auto& s : call.specs) st.inputs.push_back(s.placements);
  if (st.inputs.size() > 1) st.inputs[1] = replicate_all(call.mesh_ndim());  // fill_.Tensor's value
  st.outputs = {call.specs[0].placements};
  return st;
}

// Reading values out (item, equal): the values must be whole.
Strategy needs_replicate(const OpCall& call) { return all_replicate(call, call.n_outputs()); }

}  // namespace

void register_tensor_rules() {
  register_rule("aten::_to_copy", to_copy);
  for (const char* op :
       {"aten::clone", "aten::detach", "aten::alias", "aten::lift_fresh", "aten::contiguous",
        "aten::_conj", "aten::resolve_conj", "aten::resolve_neg"})
    register_rule(op, same_as_input);
  for (const char* op :
       {"aten::empty_like", "aten::zeros_like", "aten::ones_like", "aten::full_like"})
    register_rule(op, like);
  for (const char* op : {"aten::new_zeros", "aten::new_empty", "aten::new_ones", "aten::new_full"})
    register_rule(op, new_factory);
  register_rule("aten::new_empty_strided", new_empty_strided);
  register_rule("aten::copy_", copy_into);
  register_rule("aten::fill_", [](const OpCall& c) { return fill(c, false); });
  register_rule("aten::zero_", [](const OpCall& c) { return fill(c, true); });
  register_rule("aten::_local_scalar_dense", needs_replicate);
  register_rule("aten::equal", needs_replicate);
}

}  // namespace vescale::dtensor
