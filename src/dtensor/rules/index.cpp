// Ops that pick along one dim (gather, index_select, topk, sort), stack, and tril/triu:
// shards of the other dims stay; a shard of the dim they work along gathers first.
#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

// Placements of `s` with the shards of `dims` and all Partials replaced by Replicate.
Placements keep_other_shards(const DTensorSpec& s, const std::vector<int64_t>& dims,
                             bool keep_partial = false) {
  Placements p = s.placements;
  for (auto& q : p) {
    if (q.is_partial() && !keep_partial) q = Placement::replicate();
    if (q.is_shard() && std::find(dims.begin(), dims.end(), q.dim) != dims.end())
      q = Placement::replicate();
  }
  return p;
}

// tril / triu: the last two dims must be whole (the diagonal needs global positions).
Strategy triangle(const OpCall& call) {
  const auto& x = call.specs[0];
  Placements p = keep_other_shards(x, {x.ndim() - 2, x.ndim() - 1}, true);
  Strategy st;
  st.inputs = {p};
  st.outputs = {p};
  st.output_shapes = {x.shape};
  return st;
}

// index_select(self, dim, index): the index is small and replicated.
Strategy index_select(const OpCall& call) {
  const auto& x = call.specs[0];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), x.ndim());
  Placements p = keep_other_shards(x, {dim}, true);
  Strategy st;
  st.inputs = {p, replicate_all(call.mesh_ndim())};
  st.outputs = {p};
  auto shape = x.shape;
  shape[dim] = call.specs[1].ndim() == 0 ? 1 : call.specs[1].shape[0];
  st.output_shapes = {shape};
  return st;
}

// gather(self, dim, index): self and index shard the same other dims.
Strategy gather(const OpCall& call) {
  const auto& x = call.specs[0];
  const auto& idx = call.specs[1];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), x.ndim());
  Placements p = keep_other_shards(x, {dim});
  for (int64_t m = 0; m < call.mesh_ndim(); ++m)
    if (p[m].is_shard() && idx.shape[p[m].dim] != x.shape[p[m].dim]) p[m] = Placement::replicate();
  Strategy st;
  st.inputs = {p, p};
  st.outputs = {p};
  st.output_shapes = {idx.shape};
  return st;
}

// topk / sort / cumsum / max.dim / argmax along `dim`: the outputs keep the other shards
// (moved down by one when the dim is dropped). cumsum is linear, so it keeps Partials too.
Strategy along(const OpCall& call) {
  const auto& x = call.specs[0];
  const auto& dim_arg = call.arg("dim");
  if (dim_arg.isNone()) return all_replicate(call, call.n_outputs());  // argmax over everything
  const int64_t dim = rules::wrap_dim(dim_arg.toInt(), x.ndim());
  const bool linear = call.name.rfind("aten::cumsum", 0) == 0;
  Placements p = keep_other_shards(x, {dim}, linear);
  const bool drops = call.has_arg("keepdim") && !call.arg("keepdim").toBool();
  Placements out = p;
  for (auto& q : out)
    if (drops && q.is_shard() && q.dim > dim) q = Placement::shard(q.dim - 1);
  Strategy st;
  st.inputs = {p};
  st.outputs.assign(call.n_outputs(), out);
  auto shape = x.shape;
  if (call.has_arg("k")) shape[dim] = call.arg("k").toInt();
  if (call.has_arg("keepdim")) {
    if (drops)
      shape.erase(shape.begin() + dim);
    else
      shape[dim] = 1;
  }
  st.output_shapes.assign(st.outputs.size(), shape);
  return st;
}

// Ops whose output shape depends on the values (nonzero, bincount, histc): whole inputs.
Strategy whole(const OpCall& call) { return all_replicate(call, call.n_outputs()); }

// stack(tensors, dim): all inputs take the first one's placements; shards move past `dim`.
Strategy stack(const OpCall& call) {
  const auto& first = call.specs[0];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), first.ndim() + 1);
  Placements in = first.placements;
  for (auto& q : in)
    if (q.is_partial()) q = Placement::replicate();
  Placements out = in;
  for (auto& q : out)
    if (q.is_shard() && q.dim >= dim) q = Placement::shard(q.dim + 1);
  Strategy st;
  st.inputs.assign(call.specs.size(), in);
  st.outputs = {out};
  auto shape = first.shape;
  shape.insert(shape.begin() + dim, static_cast<int64_t>(call.specs.size()));
  st.output_shapes = {shape};
  return st;
}

// index_add(self, dim, index, source) and scatter_add(self, dim, index, src): the backward of
// index_select and gather. Shards of dims other than `dim` stay; the index is replicated for
// index_add and matches self's shards for scatter_add. A scatter into a replicated self (the
// fresh zeros of one_hot, or of topk's and gather's backward) takes the index's shard of another
// dim instead: narrowing self is free, while gathering the index and its values is a collective
// per call (four per MoE layer and micro-batch under data parallelism).
Strategy add_into(const OpCall& call, bool scatter) {
  const auto& x = call.specs[0];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), x.ndim());
  Placements p = keep_other_shards(x, {dim});
  if (scatter && call.specs.size() > 1) {
    const Placements from_index = keep_other_shards(call.specs[1], {dim});
    for (int64_t m = 0; m < call.mesh_ndim(); ++m)
      if (x.placements[m].is_replicate() && from_index[m].is_shard()) p[m] = from_index[m];
  }
  for (size_t i = 1; i < call.specs.size(); ++i)
    for (int64_t m = 0; m < call.mesh_ndim(); ++m)
      if (p[m].is_shard() &&
          (call.specs[i].ndim() != x.ndim() || call.specs[i].shape[p[m].dim] != x.shape[p[m].dim]))
        p[m] = Placement::replicate();
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  if (!scatter) st.inputs[1] = replicate_all(call.mesh_ndim());  // the 1-D index
  st.outputs = {p};
  st.output_shapes = {x.shape};
  return st;
}

}  // namespace

void register_index_rules() {
  for (const char* op : {"aten::index_add", "aten::index_add_"})
    register_rule(op, [](const OpCall& c) { return add_into(c, false); });
  for (const char* op : {"aten::scatter_add", "aten::scatter_add_", "aten::scatter.src",
                         "aten::scatter_.src", "aten::scatter.value", "aten::scatter_.value"})
    register_rule(op, [](const OpCall& c) { return add_into(c, true); });
  register_rule("aten::tril", triangle);
  register_rule("aten::triu", triangle);
  register_rule("aten::index_select", index_select);
  register_rule("aten::gather", gather);
  register_rule("aten::topk", along);
  for (const char* op : {"aten::cumsum", "aten::cumsum_", "aten::max.dim", "aten::min.dim",
                         "aten::argmax", "aten::argmin"})
    register_rule(op, along);
  for (const char* op :
       {"aten::nonzero", "aten::bincount", "aten::histc", "aten::unique_dim", "aten::_unique2"})
    register_rule(op, whole);
  register_rule("aten::sort", along);
  register_rule("aten::sort.stable", along);
  register_rule("aten::stack", stack);
}

}  // namespace vescale::dtensor
