// View and shape ops: where each sharded dim goes. Ops whose arguments are sizes (view,
// reshape, expand) run locally with the shard's sizes. A shard that a view would split
// unevenly against torch.chunk is gathered first.
#include <ATen/ATen.h>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

// Moves every Shard(d) of the single input to Shard(map[d]); map[d] < 0 means "gather it".
Strategy remap(const OpCall& call, const std::vector<int64_t>& map) {
  const auto& in = call.specs[0];
  Strategy st;
  st.inputs = {in.placements};
  Placements out = in.placements;
  for (int64_t m = 0; m < call.mesh_ndim(); ++m) {
    if (!in.placements[m].is_shard()) continue;
    const int64_t to = map[in.placements[m].dim];
    if (to < 0) {
      st.inputs[0][m] = Placement::replicate();
      out[m] = Placement::replicate();
    } else {
      out[m] = Placement::shard(to);
    }
  }
  for (size_t i = 1; i < call.specs.size(); ++i)
    st.inputs.push_back(replicate_all(call.mesh_ndim()));
  st.outputs.assign(call.n_outputs(), out);
  return st;
}

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> m(n);
  for (int64_t i = 0; i < n; ++i) m[i] = i;
  return m;
}

Strategy transpose(const OpCall& call, int64_t a, int64_t b) {
  const int64_t nd = call.specs[0].ndim();
  auto map = identity(nd);
  if (nd >= 2) std::swap(map[rules::wrap_dim(a, nd)], map[rules::wrap_dim(b, nd)]);
  Strategy st = remap(call, map);
  st.dims_from = map;  // a swap is its own inverse
  return st;
}

Strategy permute(const OpCall& call) {
  const int64_t nd = call.specs[0].ndim();
  auto dims = call.arg("dims").toIntVector();
  std::vector<int64_t> map(nd);
  for (int64_t i = 0; i < nd; ++i) map[rules::wrap_dim(dims[i], nd)] = i;
  Strategy st = remap(call, map);
  for (int64_t i = 0; i < nd; ++i) st.dims_from.push_back(rules::wrap_dim(dims[i], nd));
  return st;
}

Strategy unsqueeze(const OpCall& call) {
  const int64_t nd = call.specs[0].ndim();
  const int64_t at = rules::wrap_dim(call.arg("dim").toInt(), nd + 1);
  auto map = identity(nd);
  for (auto& d : map) d += d >= at;
  return remap(call, map);
}

Strategy squeeze_dim(const OpCall& call) {
  const auto& in = call.specs[0];
  const int64_t nd = in.ndim();
  auto map = identity(nd);
  if (nd == 0) return remap(call, map);
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), nd);
  if (in.shape[dim] != 1) return remap(call, map);
  for (auto& d : map) d = d == dim ? -1 : d - (d > dim);
  return remap(call, map);
}

// Ops that keep a dim's index but may cut it (slice, select, split, narrow): fine when that
// dim isn't sharded; a sharded one is gathered first. `drop` removes the dim (select).
Strategy along_dim(const OpCall& call, bool drop) {
  const int64_t nd = call.specs[0].ndim();
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), nd);
  auto map = identity(nd);
  for (auto& d : map) d = d == dim ? -1 : (drop ? d - (d > dim) : d);
  return remap(call, map);
}

// expand: shards of dims that aren't broadcast move right by the added leading dims; the
// local op expands to the shard's sizes.
Strategy expand(const OpCall& call) {
  const auto& in = call.specs[0];
  auto size = call.arg("size").toIntVector();
  const int64_t nd = in.ndim(), nout = static_cast<int64_t>(size.size()), lead = nout - nd;
  std::vector<int64_t> global(size);
  for (int64_t i = 0; i < nout; ++i)
    if (global[i] == -1) global[i] = in.shape[i - lead];
  std::vector<int64_t> map(nd);
  for (int64_t d = 0; d < nd; ++d) map[d] = in.shape[d] == global[d + lead] ? d + lead : -1;
  Strategy st = remap(call, map);
  st.local_fn = rules::run_with_sizes(call.op, call.op.schema().arguments().size(), 1,
                                      rules::local_shape(in.mesh, st.outputs[0], global));
  return st;
}

// view / reshape / _unsafe_view: group input and output dims with equal products. A sharded
// dim survives when it opens its group and splits evenly (its size, or the output dim's,
// divisible by the mesh dim), so that torch.chunk pieces line up on both sides.
Strategy view(const OpCall& call) {
  const auto& in = call.specs[0];
  auto size = call.arg(call.has_arg("size") ? "size" : "shape").toIntVector();
  const int64_t numel = c10::multiply_integers(in.shape);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == -1)
      infer = static_cast<int64_t>(i);
    else
      known *= size[i];
  }
  std::vector<int64_t> global(size);
  if (infer >= 0) global[infer] = known ? numel / known : 0;
  const int64_t nd = in.ndim(), no = static_cast<int64_t>(global.size());
  std::vector<int64_t> map(nd, -1);
  // Walk both shapes, matching groups [i0,i1) <-> [o0,o1) with equal products.
  int64_t i = 0, o = 0;
  while (i < nd || o < no) {
    int64_t i1 = i, o1 = o, pi = 1, po = 1;
    if (i1 < nd) pi *= in.shape[i1++];
    if (o1 < no) po *= global[o1++];
    while (pi != po) {
      if (pi < po && i1 < nd)
        pi *= in.shape[i1++];
      else if (o1 < no)
        po *= global[o1++];
      else
        break;
    }
    // The first input dim of size > 1 in the group, and the first output dim of size > 1.
    int64_t fi = i, fo = o;
    while (fi < i1 && in.shape[fi] == 1) ++fi;
    while (fo < o1 && global[fo] == 1) ++fo;
    // Several mesh dims may shard the dim (dp and ep both split the batch): torch.chunk nests
    // them, so even pieces over their product line up on both sides too.
    if (fi < i1 && fo < o1 && !in.mesh_dims_sharding(fi).empty()) {
      int64_t k = 1;
      for (int64_t m : in.mesh_dims_sharding(fi)) k *= in.mesh.shape().sizes()[m];
      const bool same = i1 - i == 1 && o1 - o == 1;
      const bool even = in.shape[fi] % k == 0 && global[fo] % k == 0;
      if (same || even) map[fi] = fo;
    }
    i = i1;
    o = o1;
    if (i1 == nd && o1 == no) break;
  }
  Strategy st = remap(call, map);
  // The wrapper reports contiguous strides, so autograd may view a DTensor whose shard is a
  // transposed view; the shard then reshapes (copying) where it can't view.
  auto local = rules::local_shape(in.mesh, st.outputs[0], global);
  const size_t n_args = call.op.schema().arguments().size();
  st.local_fn = [local, n_args](torch::jit::Stack& stack) {
    at::Tensor self = stack[stack.size() - n_args].toTensor();
    torch::jit::drop(stack, n_args);
    stack.emplace_back(self.reshape(local));
  };
  return st;
}

// cat: the cat dim must not be sharded; other dims follow the first input's placements.
Strategy cat(const OpCall& call) {
  const int64_t nm = call.mesh_ndim();
  const auto& first = call.specs[0];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), first.ndim());
  Placements p = first.placements;
  for (auto& x : p)
    if (x.is_shard(dim) || x.is_partial()) x = Placement::replicate();
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  // 1-D empty tensors are skipped by cat; keep them Replicate.
  for (size_t i = 0; i < call.specs.size(); ++i)
    if (call.specs[i].ndim() != first.ndim()) st.inputs[i] = replicate_all(nm);
  st.outputs = {p};
  return st;
}

// select_backward(grad, input_sizes, dim, index): the grad written into zeros at `index`.
// Linear in grad, so Partial stays Partial; grad's dim d lands at d, or d + 1 past `dim`.
Strategy select_backward(const OpCall& call) {
  const auto& g = call.specs[0];
  const auto sizes = call.arg(1).toIntVector();
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t dim = (call.arg(2).toInt() % rank + rank) % rank;
  Strategy st;
  st.inputs = {g.placements};
  Placements out = g.placements;
  for (auto& p : out)
    if (p.is_shard() && p.dim >= dim) p = Placement::shard(p.dim + 1);
  st.outputs = {out};
  st.output_shapes = {sizes};
  st.local_fn = [dim](torch::jit::Stack& stack) {
    const int64_t n = static_cast<int64_t>(stack.size());
    at::Tensor grad = stack[n - 4].toTensor();
    auto local = grad.sizes().vec();
    local.insert(local.begin() + dim, stack[n - 3].toIntVector()[dim]);
    const int64_t index = stack[n - 1].toInt();
    stack.resize(n - 4);
    stack.emplace_back(at::select_backward(grad, local, dim, index));
  };
  return st;
}

// slice_backward(grad, input_sizes, dim, start, end, step): the grad written into zeros at the
// slice. Linear in grad; a shard along `dim` itself is gathered, other dims stay put.
Strategy slice_backward(const OpCall& call) {
  const auto& g = call.specs[0];
  const auto sizes = call.arg(1).toIntVector();
  const int64_t rank = static_cast<int64_t>(sizes.size());
  const int64_t dim = (call.arg(2).toInt() % rank + rank) % rank;
  Strategy st;
  Placements in = g.placements;
  for (auto& p : in)
    if (p.is_shard(dim)) p = Placement::replicate();
  st.inputs = {in};
  st.outputs = {in};
  st.output_shapes = {sizes};
  st.local_fn = [dim](torch::jit::Stack& stack) {
    const int64_t n = static_cast<int64_t>(stack.size());
    at::Tensor grad = stack[n - 6].toTensor();
    auto local = grad.sizes().vec();
    local[dim] = stack[n - 5].toIntVector()[dim];
    const int64_t start = stack[n - 3].toInt(), end = stack[n - 2].toInt(),
                  step = stack[n - 1].toInt();
    stack.resize(n - 6);
    stack.emplace_back(at::slice_backward(grad, local, dim, start, end, step));
  };
  return st;
}

}  // namespace

void register_view_rules() {
  // Even on replicated inputs: a shard may be a transposed view that only a reshape can handle, and
  // the permutations give the output's strides (Strategy::dims_from).
  const RuleOptions always{.even_when_replicated = true};
  register_rule(
      "aten::t", [](const OpCall& c) { return transpose(c, 0, 1); }, always);
  register_rule(
      "aten::transpose.int",
      [](const OpCall& c) { return transpose(c, c.arg("dim0").toInt(), c.arg("dim1").toInt()); },
      always);
  register_rule("aten::permute", permute, always);
  register_rule("aten::unsqueeze", unsqueeze);
  register_rule("aten::squeeze.dim", squeeze_dim);
  register_rule("aten::select.int", [](const OpCall& c) { return along_dim(c, true); });
  register_rule("aten::slice.Tensor", [](const OpCall& c) { return along_dim(c, false); });
  register_rule("aten::narrow", [](const OpCall& c) { return along_dim(c, false); });
  register_rule("aten::split.Tensor", [](const OpCall& c) { return along_dim(c, false); });
  register_rule("aten::split_with_sizes", [](const OpCall& c) { return along_dim(c, false); });
  register_rule("aten::expand", expand);
  register_rule("aten::view", view, always);
  register_rule("aten::_unsafe_view", view, always);
  register_rule("aten::reshape", view);
  register_rule("aten::cat", cat);
  register_rule("aten::select_backward", select_backward);
  register_rule("aten::slice_backward", slice_backward);
}

}  // namespace vescale::dtensor
