// native_layer_norm and its backward, and linalg_vector_norm (grad clipping). Layer norm keeps
// shards of the leading (non-normalized) dims; its weight and bias grads are then Partial sums.
#include <ATen/ATen.h>

#include <cmath>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

std::vector<int64_t> stats_shape(const DTensorSpec& x, int64_t axis) {
  std::vector<int64_t> s(x.shape.begin(), x.shape.begin() + axis);
  for (int64_t d = axis; d < x.ndim(); ++d) s.push_back(1);
  return s;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
Strategy layer_norm(const OpCall& call) {
  const auto& x = call.specs[0];
  const int64_t axis =
      x.ndim() - static_cast<int64_t>(call.arg("normalized_shape").toIntVector().size());
  Placements p = shards_below(x, axis);
  Strategy st;
  st.inputs.assign(call.specs.size(), replicate_all(call.mesh_ndim()));
  st.inputs[0] = p;
  st.outputs = {p, p, p};
  st.output_shapes = {x.shape, stats_shape(x, axis), stats_shape(x, axis)};
  return st;
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, mask)
//   -> (grad_input, grad_weight, grad_bias)
Strategy layer_norm_backward(const OpCall& call) {
  const auto& x = call.specs[1];
  const int64_t nm = call.mesh_ndim();
  auto norm_shape = call.arg("normalized_shape").toIntVector();
  const int64_t axis = x.ndim() - static_cast<int64_t>(norm_shape.size());
  Placements p = shards_below(x, axis);
  const Placements wgrad = partial_where_sharded(p);  // summed over the sharded rows
  Strategy st;
  st.inputs.assign(call.specs.size(), replicate_all(nm));
  st.inputs[0] = p;
  st.inputs[1] = p;
  st.inputs[2] = p;  // mean
  st.inputs[3] = p;  // rstd
  st.outputs = {p, wgrad, wgrad};
  st.output_shapes = {x.shape, norm_shape, norm_shape};
  return st;
}

// linalg_vector_norm(self, ord, dim?, keepdim, dtype?) over all dims: the norm of the whole
// tensor, from the shards' partial powers (or maxima), all-reduced over the sharded mesh dims.
Strategy vector_norm(const OpCall& call) {
  const auto& x = call.specs[0];
  const int64_t nm = call.mesh_ndim();
  const auto& dim_arg = call.arg("dim");
  const bool all_dims = dim_arg.isNone() || dim_arg.toIntVector().empty() ||
                        static_cast<int64_t>(dim_arg.toIntVector().size()) == x.ndim();
  if (!all_dims) return all_replicate(call, 1);
  Placements p = x.placements;
  std::vector<dist::ProcessGroup> groups;
  for (int64_t m = 0; m < nm; ++m) {
    if (p[m].is_partial()) p[m] = Placement::replicate();
    if (p[m].is_shard()) groups.push_back(x.mesh.group(x.mesh.dim_names()[m]));
  }
  Strategy st;
  st.inputs = {p};
  st.outputs = {replicate_all(nm)};
  const bool keepdim = call.arg("keepdim").toBool();
  st.output_shapes = {keepdim ? std::vector<int64_t>(x.ndim(), 1) : std::vector<int64_t>{}};
  if (!groups.empty()) {
    st.local_fn = [groups](torch::jit::Stack& stack) mutable {
      auto a = torch::jit::last(stack, 5);
      at::Tensor self = a[0].toTensor();
      const double ord = a[1].toScalar().toDouble();
      const bool keepdim = a[3].toBool();
      std::optional<at::ScalarType> dtype;
      if (a[4].isInt()) dtype = static_cast<at::ScalarType>(a[4].toInt());
      torch::jit::drop(stack, 5);
      at::Tensor v = dtype ? self.to(*dtype) : self;
      at::Tensor r;
      if (std::isinf(ord)) {
        r = v.numel() ? (ord > 0 ? v.abs().amax() : v.abs().amin())
                      : at::full({}, ord > 0 ? 0.0 : INFINITY, v.options());
        r = r.contiguous();
        for (auto& g : groups)
          g.all_reduce(r, ord > 0 ? dist::ReduceOp::Max : dist::ReduceOp::Min).wait();
      } else {
        VESCALE_CHECK(
            ord > 0,
            "DTensor: linalg_vector_norm of a sharded tensor supports ord > 0 or inf, got ", ord);
        r = v.abs().pow(ord).sum().contiguous();
        for (auto& g : groups) g.all_reduce(r).wait();
        r = r.pow(1.0 / ord);
      }
      if (keepdim) r = r.reshape(std::vector<int64_t>(self.dim(), 1));
      stack.emplace_back(r);
    };
  }
  return st;
}

}  // namespace

void register_norm_rules() {
  register_rule("aten::native_layer_norm", layer_norm);
  register_rule("aten::native_layer_norm_backward", layer_norm_backward);
  register_rule("aten::linalg_vector_norm", vector_norm);
}

}  // namespace vescale::dtensor
