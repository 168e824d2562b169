// sum / mean / amax / amin over dims (or all), with keepdim. A shard along a reduced dim
// becomes Partial(sum|max|min); a shard along a kept dim moves to its new index. A mean over a
// sharded dim runs locally as a sum divided by the global count.
#include <ATen/ATen.h>

#include <cmath>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

enum class Reduce { Sum, Mean, Max, Min };

Strategy reduction(const OpCall& call, Reduce kind) {
  const auto& in = call.specs[0];
  const int64_t nm = call.mesh_ndim(), nd = in.ndim();
  const bool has_dim = call.has_arg("dim");
  const auto dims = rules::reduce_dims(has_dim ? call.arg("dim") : c10::IValue(), nd);
  const bool keepdim = call.has_arg("keepdim") && call.arg("keepdim").toBool();
  auto reduced = [&](int64_t d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  const dist::ReduceOp partial_op = kind == Reduce::Max   ? dist::ReduceOp::Max
                                    : kind == Reduce::Min ? dist::ReduceOp::Min
                                                          : dist::ReduceOp::Sum;

  Strategy st;
  st.inputs = {in.placements};
  Placements out(nm, Placement::replicate());
  bool sharded_mean = false, sharded_extreme = false;
  for (int64_t m = 0; m < nm; ++m) {
    const auto& p = in.placements[m];
    if (p.is_shard()) {
      if (reduced(p.dim)) {
        out[m] = Placement::partial(partial_op);
        sharded_mean |= kind == Reduce::Mean;
        sharded_extreme |= kind == Reduce::Max || kind == Reduce::Min;
      } else {
        int64_t nd_out = p.dim;
        if (!keepdim)
          for (auto d : dims) nd_out -= d < p.dim;
        out[m] = Placement::shard(nd_out);
      }
    } else if (p.is_partial()) {
      const bool linear =
          (kind == Reduce::Sum || kind == Reduce::Mean) && p.reduce == dist::ReduceOp::Sum;
      const bool same = p.reduce == partial_op && (kind == Reduce::Max || kind == Reduce::Min);
      if (linear || same)
        out[m] = p;
      else
        st.inputs[0][m] = Placement::replicate();
    }
  }
  st.outputs = {out};
  if (sharded_mean) {
    int64_t count = 1;
    for (auto d : dims) count *= in.shape[d];
    const size_t n_args = call.op.schema().arguments().size();
    st.local_fn = [dims, keepdim, count, n_args, has_dim](torch::jit::Stack& stack) {
      auto args = torch::jit::last(stack, n_args);
      at::Tensor self = args[0].toTensor();
      std::optional<at::ScalarType> dtype;
      const auto& dt = args[n_args - 1];
      if (dt.isInt()) dtype = static_cast<at::ScalarType>(dt.toInt());
      at::Tensor r = at::sum(self, dims, has_dim ? keepdim : false, dtype).div_(count);
      torch::jit::drop(stack, n_args);
      stack.emplace_back(std::move(r));
    };
  }
  if (sharded_extreme) {
    // torch.chunk can leave a rank with an empty shard; its term is the identity of max/min.
    const size_t n_args = call.op.schema().arguments().size();
    const bool is_max = kind == Reduce::Max;
    st.local_fn = [dims, keepdim, n_args, is_max](torch::jit::Stack& stack) {
      at::Tensor self = stack[stack.size() - n_args].toTensor();
      torch::jit::drop(stack, n_args);
      at::Tensor r;
      if (self.numel() > 0) {
        r = is_max ? at::amax(self, dims, keepdim) : at::amin(self, dims, keepdim);
      } else {
        auto shape = self.sizes().vec();
        for (auto d : dims) shape[d] = 1;
        r = at::full(shape, is_max ? -INFINITY : INFINITY, self.options());
        if (!keepdim) r = r.squeeze(dims);
      }
      stack.emplace_back(std::move(r));
    };
  }
  return st;
}

}  // namespace

void register_reduction_rules() {
  register_rule("aten::sum", [](const OpCall& c) { return reduction(c, Reduce::Sum); });
  register_rule("aten::sum.dim_IntList", [](const OpCall& c) { return reduction(c, Reduce::Sum); });
  register_rule("aten::mean", [](const OpCall& c) { return reduction(c, Reduce::Mean); });
  register_rule("aten::mean.dim", [](const OpCall& c) { return reduction(c, Reduce::Mean); });
  register_rule("aten::amax", [](const OpCall& c) { return reduction(c, Reduce::Max); });
  register_rule("aten::amin", [](const OpCall& c) { return reduction(c, Reduce::Min); });
}

}  // namespace vescale::dtensor
