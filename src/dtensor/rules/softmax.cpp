// softmax / log_softmax and their backward, and nll_loss: together, a vocab-parallel
// cross-entropy. Logits sharded along the class dim stay sharded: the max and the sum of
// exponentials are all-reduced over that mesh dim (two small collectives) instead of
// gathering the logits.
#include <ATen/ATen.h>

#include <cmath>

#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {

dist::ProcessGroup group(const DTensorSpec& s, int64_t m) {
  return s.mesh.group(s.mesh.dim_names()[m]);
}

// The single mesh dim sharding `dim` of `s`, if exactly one does; others along `dim` gather.
std::optional<int64_t> class_parallel_dim(const DTensorSpec& s, int64_t dim) {
  auto ms = s.mesh_dims_sharding(dim);
  if (ms.size() == 1) return ms[0];
  return std::nullopt;
}

// Placements for softmax-like ops: shards off the softmax dim stay; Partials and extra shards
// along it gather. The class dim may stay sharded on one mesh dim (class_parallel).
Placements softmax_placements(const DTensorSpec& s, int64_t dim,
                              std::optional<int64_t> class_mesh_dim) {
  Placements p = s.placements;
  for (int64_t m = 0; m < static_cast<int64_t>(p.size()); ++m) {
    if (p[m].is_partial()) p[m] = Placement::replicate();
    if (p[m].is_shard(dim) && class_mesh_dim != m) p[m] = Placement::replicate();
  }
  return p;
}

Strategy softmax_forward(const OpCall& call, bool log, bool class_parallel = true) {
  const auto& in = call.specs[0];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), in.ndim());
  const auto cm = class_parallel ? class_parallel_dim(in, dim) : std::nullopt;
  Strategy st;
  st.inputs = {softmax_placements(in, dim, cm)};
  st.outputs = {st.inputs[0]};
  st.output_shapes = {in.shape};
  if (cm) {
    auto g = group(in, *cm);
    st.local_fn = [g, dim, log](torch::jit::Stack& stack) mutable {
      at::Tensor x = stack[stack.size() - 3].toTensor();
      torch::jit::drop(stack, 3);
      at::Tensor mx = x.size(dim) > 0
                          ? at::amax(x, {dim}, true)
                          : at::full_like(x.narrow(dim, 0, 0).sum(dim, true), -INFINITY);
      mx = mx.contiguous();
      g.all_reduce(mx, dist::ReduceOp::Max).wait();
      at::Tensor shifted = x - mx;
      at::Tensor se = at::exp(shifted).sum(dim, true).contiguous();
      g.all_reduce(se, dist::ReduceOp::Sum).wait();
      stack.emplace_back(log ? shifted - at::log(se) : at::exp(shifted) / se);
    };
  }
  return st;
}

// _softmax_backward_data / _log_softmax_backward_data (grad_output, output, dim, input_dtype).
Strategy softmax_backward(const OpCall& call, bool log) {
  const auto& grad = call.specs[0];
  const auto& out = call.specs[1];
  const int64_t dim = rules::wrap_dim(call.arg("dim").toInt(), out.ndim());
  const auto cm = class_parallel_dim(out, dim);
  Placements p = softmax_placements(out, dim, cm);
  (void)grad;
  Strategy st;
  st.inputs = {p, p};
  st.outputs = {p};
  st.output_shapes = {out.shape};
  if (cm) {
    auto g = group(out, *cm);
    st.local_fn = [g, dim, log](torch::jit::Stack& stack) mutable {
      at::Tensor gy = stack[stack.size() - 4].toTensor();
      at::Tensor y = stack[stack.size() - 3].toTensor();
      torch::jit::drop(stack, 4);
      at::Tensor s = (log ? gy.sum(dim, true) : (gy * y).sum(dim, true)).contiguous();
      g.all_reduce(s, dist::ReduceOp::Sum).wait();
      stack.emplace_back(log ? gy - at::exp(y) * s : y * (gy - s));
    };
  }
  return st;
}

// How nll_loss lays out its (N, C) input: batch shards (dim 0) and class shards (dim 1) stay,
// Partials reduce; the target follows the batch shards; c_off is this rank's first class.
struct NllLayout {
  Placements self, target;
  int64_t c_off = 0;
  std::vector<dist::ProcessGroup> batch_groups;
};

NllLayout nll_layout(const DTensorSpec& self) {
  const int64_t nm = self.mesh.ndim();
  NllLayout l{self.placements, Placements(nm, Placement::replicate()), 0, {}};
  for (int64_t m = 0; m < nm; ++m) {
    if (l.self[m].is_partial()) l.self[m] = Placement::replicate();
    if (l.self[m].is_shard(0)) {
      l.target[m] = Placement::shard(0);
      l.batch_groups.push_back(group(self, m));
    }
  }
  l.c_off = DTensorSpec{self.mesh, l.self, self.shape, self.dtype}.local_offset()[1];
  return l;
}

// Row by row: whether the target falls in this rank's classes [c_off, c_off + C_local), its
// local column, and the row's weight (0 for ignored rows). Shared by forward and backward.
struct NllPick {
  at::Tensor mine, column, weight;
};

NllPick pick_targets(const at::Tensor& x, const at::Tensor& target, const c10::IValue& weight_arg,
                     int64_t ignore, int64_t c_off) {
  at::Tensor valid = target != ignore;
  at::Tensor mine = valid & (target >= c_off) & (target < c_off + x.size(1));
  at::Tensor column = at::where(mine, target - c_off, at::zeros_like(target)).unsqueeze(1);
  at::Tensor w =
      weight_arg.isTensor() && weight_arg.toTensor().defined()
          ? weight_arg.toTensor().index_select(0, at::where(valid, target, at::zeros_like(target)))
          : at::ones({x.size(0)}, x.options());
  return {mine, column, w * valid.to(w.scalar_type())};
}

// nll_loss_forward(self (N, C), target (N), weight?, reduction, ignore_index) -> (output,
// total_weight). Batch shards (dim 0) and class shards (dim 1) are both kept. Every rank picks the
// targets that fall in its class range; the loss is Partial over class and batch shards, and the
// total weight (for the mean) is all-reduced over the batch shards.
Strategy nll_forward(const OpCall& call) {
  const auto& self = call.specs[0];
  const int64_t nm = call.mesh_ndim();
  if (self.ndim() != 2) return all_replicate(call, 2);
  const auto layout = nll_layout(self);
  const Placements& p = layout.self;
  const int64_t c_off = layout.c_off;
  auto batch_groups = layout.batch_groups;
  const int64_t reduction = call.arg("reduction").toInt();
  Strategy st;
  st.inputs.assign(call.specs.size(), replicate_all(nm));
  st.inputs[0] = p;
  st.inputs[1] = layout.target;  // weight, if any, stays Replicate
  Placements out(nm, Placement::replicate());
  for (int64_t m = 0; m < nm; ++m) {
    if (p[m].is_shard(1)) out[m] = Placement::partial();
    if (p[m].is_shard(0))
      out[m] = reduction == at::Reduction::None ? Placement::shard(0) : Placement::partial();
  }
  st.outputs = {out, replicate_all(nm)};
  st.output_shapes = {reduction == at::Reduction::None ? std::vector<int64_t>{self.shape[0]}
                                                       : std::vector<int64_t>{},
                      std::vector<int64_t>{}};
  st.local_fn = [c_off, batch_groups](torch::jit::Stack& stack) mutable {
    auto a = torch::jit::last(stack, 5);
    at::Tensor x = a[0].toTensor();
    const auto pick = pick_targets(x, a[1].toTensor(), a[2], a[4].toInt(), c_off);
    const int64_t reduction = a[3].toInt();
    torch::jit::drop(stack, 5);
    at::Tensor picked =
        x.size(1) > 0 ? x.gather(1, pick.column).squeeze(1) : at::zeros({x.size(0)}, x.options());
    at::Tensor loss = -(picked * pick.weight * pick.mine.to(pick.weight.scalar_type()));
    at::Tensor total = pick.weight.sum().contiguous();
    for (auto& g : batch_groups) g.all_reduce(total).wait();
    at::Tensor out = reduction == at::Reduction::None  ? loss
                     : reduction == at::Reduction::Sum ? loss.sum()
                                                       : loss.sum() / total;
    stack.emplace_back(out);
    stack.emplace_back(total);
  };
  return st;
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight).
Strategy nll_backward(const OpCall& call) {
  const auto& self = call.specs[1];
  const int64_t nm = call.mesh_ndim();
  if (self.ndim() != 2) return all_replicate(call, 1);
  const auto layout = nll_layout(self);
  const Placements& p = layout.self;
  const Placements& tp = layout.target;
  const int64_t c_off = layout.c_off;
  const int64_t reduction = call.arg("reduction").toInt();
  Strategy st;
  st.inputs.assign(call.specs.size(), replicate_all(nm));
  // grad_output: per-sample grads follow the batch shards; a scalar is Replicate.
  st.inputs[0] = reduction == at::Reduction::None ? tp : replicate_all(nm);
  st.inputs[1] = p;
  st.inputs[2] = tp;
  st.outputs = {p};
  st.output_shapes = {self.shape};
  st.local_fn = [c_off](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, 7);
    at::Tensor gy = a[0].toTensor(), x = a[1].toTensor(), total = a[6].toTensor();
    const auto pick = pick_targets(x, a[2].toTensor(), a[3], a[5].toInt(), c_off);
    const int64_t reduction = a[4].toInt();
    torch::jit::drop(stack, 7);
    at::Tensor grad = at::zeros_like(x);
    at::Tensor scale = reduction == at::Reduction::None  ? gy
                       : reduction == at::Reduction::Sum ? gy.expand({x.size(0)})
                                                         : (gy / total).expand({x.size(0)});
    at::Tensor vals = -(pick.weight * scale * pick.mine.to(x.scalar_type()));
    if (x.size(1) > 0) grad.scatter_add_(1, pick.column, vals.unsqueeze(1));
    stack.emplace_back(grad);
  };
  return st;
}

}  // namespace

void register_softmax_rules() {
  register_rule("aten::_softmax", [](const OpCall& c) { return softmax_forward(c, false); });
  register_rule("aten::_log_softmax", [](const OpCall& c) { return softmax_forward(c, true); });
  // sdpa's math path; fully masked rows give 0, so the class-parallel form doesn't apply.
  register_rule("aten::_safe_softmax",
                [](const OpCall& c) { return softmax_forward(c, false, false); });
  register_rule("aten::_softmax_backward_data",
                [](const OpCall& c) { return softmax_backward(c, false); });
  register_rule("aten::_log_softmax_backward_data",
                [](const OpCall& c) { return softmax_backward(c, true); });
  register_rule("aten::nll_loss_forward", nll_forward);
  register_rule("aten::nll_loss_backward", nll_backward);
}

}  // namespace vescale::dtensor
