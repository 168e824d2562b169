// Pointwise ops (every op tagged `pointwise`, in-place included), with broadcasting.
// A shard of the output needs the matching shard of each input that has that dim at full
// size; broadcast inputs stay Replicate. Partial survives only through linear ops.
#include <set>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

// Linear in all inputs together: Partial(sum) in, Partial(sum) out when every input is Partial.
const std::set<std::string> kAdditive = {"aten::add.Tensor", "aten::add_.Tensor",
                                         "aten::sub.Tensor", "aten::sub_.Tensor",
                                         "aten::neg",        "aten::neg_"};
// Linear in one input (the first, for div): Partial in that one, Replicate in the rest.
const std::set<std::string> kMultiplicative = {
    "aten::mul.Tensor", "aten::mul_.Tensor", "aten::mul.Scalar", "aten::mul_.Scalar",
    "aten::div.Tensor", "aten::div_.Tensor", "aten::div.Scalar", "aten::div_.Scalar"};

Strategy pointwise(const OpCall& call) {
  const auto& specs = call.specs;
  const int64_t nm = call.mesh_ndim();
  std::vector<std::vector<int64_t>> shapes;
  for (auto& s : specs) shapes.push_back(s.shape);
  const auto out_shape = rules::broadcast_shapes(shapes);
  const int64_t nd = static_cast<int64_t>(out_shape.size());
  const bool inplace = call.is_inplace();
  const bool additive = kAdditive.count(call.name) > 0;
  const bool multiplicative = kMultiplicative.count(call.name) > 0;

  // Input i's dim for output dim D, or -1 when i broadcasts along it.
  auto in_dim = [&](size_t i, int64_t D) -> int64_t {
    const int64_t di = D - (nd - specs[i].ndim());
    return (di >= 0 && specs[i].shape[di] == out_shape[D]) ? di : -1;
  };

  Strategy st;
  st.inputs.assign(specs.size(), replicate_all(nm));
  Placements out(nm, Placement::replicate());
  for (int64_t m = 0; m < nm; ++m) {
    // 1. Sharded output if an input (self, for in-place) is sharded along a full-size dim.
    std::optional<int64_t> shard_out;
    for (size_t i = 0; i < specs.size() && !shard_out; ++i) {
      if (inplace && i > 0) break;
      const auto& p = specs[i].placements[m];
      if (p.is_shard()) {
        const int64_t D = p.dim + (nd - specs[i].ndim());
        if (in_dim(i, D) >= 0) shard_out = D;
      }
    }
    if (shard_out) {
      out[m] = Placement::shard(*shard_out);
      for (size_t i = 0; i < specs.size(); ++i) {
        const int64_t di = in_dim(i, *shard_out);
        st.inputs[i][m] = di >= 0 ? Placement::shard(di) : Placement::replicate();
      }
      continue;
    }
    // 2. Partial through linear ops.
    size_t n_partial = 0;
    for (auto& s : specs)
      n_partial += s.placements[m].is_partial() && s.placements[m].reduce == dist::ReduceOp::Sum;
    const bool self_partial = specs[0].placements[m].is_partial();
    if (additive && n_partial == specs.size()) {
      out[m] = Placement::partial();
      for (auto& in : st.inputs) in[m] = Placement::partial();
      continue;
    }
    if (multiplicative && n_partial == 1) {
      size_t which = 0;
      while (!specs[which].placements[m].is_partial()) ++which;
      const bool allowed =
          call.name.rfind("aten::div", 0) != 0 || which == 0;  // a / partial is not linear
      if (allowed) {
        out[m] = Placement::partial();
        st.inputs[which][m] = Placement::partial();
        continue;
      }
    }
    // 3. Otherwise everything is Replicate (an in-place op reduces its Partial self first).
    (void)self_partial;
  }
  st.outputs.assign(call.n_outputs(), out);
  st.output_shapes.assign(st.outputs.size(), out_shape);
  return st;
}

}  // namespace

void register_pointwise_rules() { register_rule("@pointwise", pointwise); }

}  // namespace vescale::dtensor
