// Fused vocab-parallel cross-entropy (Megatron's loss-parallel). at::cross_entropy_loss is a
// composite of log_softmax and nll_loss; on class-sharded logits that composite's backward
// needs the vocab sum of the nll gradient (one all-reduce). The sum is known locally: the
// nll gradient of a row is -w at its target, so the logits' gradient is (softmax - onehot) * w
// on every shard. This file registers an autograd kernel for cross_entropy_loss on DTensors
// that computes exactly that, and hands every other case back to libtorch's composite.
#include <ATen/ATen.h>
#include <ATen/ops/cross_entropy_loss_native.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

#include "dtensor/dtensor_impl.h"
#include "dtensor/redistribute.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// How the logits (N, C) are laid out, if the fused path applies: C sharded on exactly one
// mesh dim, N sharded (Shard(0)) or replicated on the others, no Partial.
struct Layout {
  int64_t class_dim = -1;           // the mesh dim sharding the classes
  std::vector<int64_t> batch_dims;  // mesh dims sharding the rows
  Placements target;                // what the target must be: Shard(0) on batch dims
  Placements loss;                  // Partial on the class and batch dims
};

std::optional<Layout> fused_layout(const at::Tensor& self, const at::Tensor& target,
                                   const std::optional<at::Tensor>& weight, int64_t reduction,
                                   double smoothing) {
  if (!is_dtensor(self) || self.dim() != 2 || target.dim() != 1 || smoothing != 0.0)
    return std::nullopt;
  if ((weight && weight->defined()) || reduction == at::Reduction::None) return std::nullopt;
  if (at::isFloatingType(target.scalar_type())) return std::nullopt;  // class probabilities
  const auto& s = dtensor_impl(self)->spec();
  Layout l;
  const int64_t nm = s.mesh.ndim();
  l.target.assign(nm, Placement::replicate());
  l.loss.assign(nm, Placement::replicate());
  for (int64_t m = 0; m < nm; ++m) {
    const auto& p = s.placements[m];
    if (p.is_partial()) return std::nullopt;
    if (p.is_shard(1)) {
      if (l.class_dim >= 0) return std::nullopt;
      l.class_dim = m;
      l.loss[m] = Placement::partial();
    } else if (p.is_shard(0)) {
      l.batch_dims.push_back(m);
      l.target[m] = Placement::shard(0);
      l.loss[m] = Placement::partial();
    }
  }
  if (l.class_dim < 0) return std::nullopt;
  // The target must already be laid out along the rows like the logits (a plain tensor is
  // the whole target, which fits only when the rows are not sharded).
  if (is_dtensor(target)) {
    const auto& ts = dtensor_impl(target)->spec();
    if (!(ts.mesh == s.mesh) || ts.placements != l.target) return std::nullopt;
  } else if (!l.batch_dims.empty()) {
    return std::nullopt;
  }
  return l;
}

dist::ProcessGroup group_of(const DTensorSpec& s, int64_t m) {
  return s.mesh.group(s.mesh.dim_names()[m]);
}

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  // Forward on the local shards: the row max and the sum of exponentials are all-reduced over
  // the class dim (the two collectives of the composite); the row's loss lse - z_target is
  // counted by the rank holding the target (Partial over the class dim), and the mean's
  // count of valid rows is summed over the batch dims.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& self, const at::Tensor& target,
                            int64_t reduction, int64_t ignore_index) {
    const auto& spec = dtensor_impl(self)->spec();
    const Layout l = *fused_layout(self, target, std::nullopt, reduction, 0.0);
    const at::Tensor x = dtensor_impl(self)->local();
    const at::Tensor t = is_dtensor(target) ? dtensor_impl(target)->local() : target;
    const int64_t c_off = spec.local_offset()[1], c_local = x.size(1);
    auto g = group_of(spec, l.class_dim);

    at::Tensor mx =
        c_local > 0 ? at::amax(x, {1}, true) : at::full({x.size(0), 1}, -INFINITY, x.options());
    mx = mx.contiguous();
    g.all_reduce(mx, dist::ReduceOp::Max).wait();
    at::Tensor shifted = x - mx;
    at::Tensor exp = at::exp(shifted);
    at::Tensor se = exp.sum(1, true).contiguous();
    g.all_reduce(se, dist::ReduceOp::Sum).wait();
    at::Tensor log_se = at::log(se);

    at::Tensor valid = t != ignore_index;
    at::Tensor mine = valid & (t >= c_off) & (t < c_off + c_local);
    at::Tensor column = at::where(mine, t - c_off, at::zeros_like(t)).unsqueeze(1);
    at::Tensor picked =
        c_local > 0 ? shifted.gather(1, column).squeeze(1) : at::zeros({x.size(0)}, x.options());
    // -log_softmax at the target, on the rank that holds it; 0 elsewhere and on ignored rows.
    at::Tensor row_loss = (log_se.squeeze(1) - picked) * mine.to(x.scalar_type());
    at::Tensor total = valid.to(x.scalar_type()).sum().contiguous();
    if (reduction == at::Reduction::Mean)
      for (int64_t m : l.batch_dims) group_of(spec, m).all_reduce(total).wait();
    at::Tensor loss = reduction == at::Reduction::Mean ? row_loss.sum() / total : row_loss.sum();

    // Saved for backward: the softmax shard, where the one-hot goes, and each row's weight.
    at::Tensor row_weight = valid.to(x.scalar_type());
    if (reduction == at::Reduction::Mean) row_weight = row_weight / total;
    ctx->save_for_backward({exp.div_(se), column, mine, row_weight, self});
    return make_dtensor(loss, DTensorSpec{spec.mesh, l.loss, {}, loss.scalar_type()});
  }

  // d loss / d logits = (softmax - onehot(target)) * row weight * grad, all local.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& self = saved[4];
    const auto& spec_ptr = dtensor_impl(self)->spec_ptr();
    at::Tensor gy = grads[0];
    if (is_dtensor(gy)) {
      const auto& gs = dtensor_impl(gy)->spec();
      gy = gs.is_replicated()
               ? dtensor_impl(gy)->local()
               : redistribute_local(dtensor_impl(gy)->local(), gs,
                                    Placements(gs.placements.size(), Placement::replicate()));
    }
    at::Tensor grad = saved[0].clone();
    if (grad.size(1) > 0)
      grad.scatter_add_(1, saved[1], -saved[2].unsqueeze(1).to(grad.scalar_type()));
    grad.mul_((saved[3] * gy).unsqueeze(1));
    return {make_dtensor(grad, spec_ptr), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor cross_entropy_loss(const at::Tensor& self, const at::Tensor& target,
                              const std::optional<at::Tensor>& weight, int64_t reduction,
                              c10::SymInt ignore_index, double label_smoothing) {
  if (fused_layout(self, target, weight, reduction, label_smoothing))
    return VocabParallelCrossEntropy::apply(self, target, reduction, ignore_index.expect_int());
  return at::native::cross_entropy_loss_symint(self, target, weight, reduction,
                                               std::move(ignore_index), label_smoothing);
}

}  // namespace

// An autograd kernel of the dtensor backend's own: it takes precedence over the composite
// (CompositeImplicitAutograd) kernel for calls with a DTensor argument, and only for those.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("cross_entropy_loss", TORCH_FN(cross_entropy_loss));
}

}  // namespace vescale::dtensor
