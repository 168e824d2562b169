// The public DTensor conversions, each differentiable through a small autograd node.
#include <ATen/ATen.h>
#include <c10/core/AutogradState.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "dtensor/dtensor_impl.h"
#include "dtensor/redistribute.h"
#include "vescale/common/check.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

using torch::autograd::variable_list;

// Backward of a one-input, one-output conversion: grad_in = fn(grad_out).
struct ConversionBackward : torch::autograd::Node {
  std::string label;
  std::function<at::Tensor(const at::Tensor&)> fn;
  variable_list apply(variable_list&& grads) override {
    return {grads[0].defined() ? fn(grads[0]) : at::Tensor()};
  }
  std::string name() const override { return label; }
};

at::Tensor link(at::Tensor out, const at::Tensor& in, const char* label,
                std::function<at::Tensor(const at::Tensor&)> fn) {
  if (!in.requires_grad() || !torch::autograd::GradMode::is_enabled()) return out;
  auto node =
      std::shared_ptr<ConversionBackward>(new ConversionBackward(), torch::autograd::deleteNode);
  node->label = label;
  node->fn = std::move(fn);
  node->set_next_edges(torch::autograd::collect_next_edges(in));
  torch::autograd::set_history(out, node);
  return out;
}

std::shared_ptr<const DTensorSpec> make_spec(const mesh::DeviceMesh& mesh, Placements placements,
                                             std::vector<int64_t> shape, c10::ScalarType dtype) {
  DTensorSpec s{mesh, std::move(placements), std::move(shape), dtype};
  s.validate_and_normalize();
  return std::make_shared<const DTensorSpec>(std::move(s));
}

void check_device(const at::Tensor& t, const mesh::DeviceMesh& mesh, const char* fn) {
  const bool want_cuda = mesh.device_type() == "cuda";
  // A meta tensor holds no values, so it fits any mesh (a pipeline's other-stage parameters).
  VESCALE_CHECK(t.is_meta() || (want_cuda ? t.is_cuda() : t.is_cpu()), fn, ": the tensor is on ", t.device().str(),
                " but the mesh's ranks use ", mesh.device_type(), "; move it with .to(",
                dist::device_string(), ") first");
}

// Grads of a tensor in placements `p` arrive (as DTensors) in whatever placements the graph
// gives; Partial inputs get Replicate grads (d sum_r x_r / d x_r = 1).
Placements grad_placements(const Placements& p) {
  Placements g = p;
  for (auto& x : g)
    if (x.is_partial()) x = Placement::replicate();
  return g;
}

at::Tensor redistribute_grad(const at::Tensor& grad, const Placements& target) {
  VESCALE_CHECK(is_dtensor(grad),
                "DTensor backward: the incoming gradient is a plain tensor; gradients of "
                "DTensors must be DTensors");
  const auto& gs = spec_of(grad);
  if (gs.placements == target) return grad;
  log_redistribution("redistribute backward", -1, gs.placements, target);
  auto spec = make_spec(gs.mesh, target, gs.shape, gs.dtype);
  return make_dtensor(redistribute_local(dtensor_impl(grad)->local(), gs, target), spec);
}

}  // namespace

at::Tensor redistribute(const at::Tensor& dt, Placements placements) {
  const auto& src = spec_of(dt);
  auto dst = make_spec(src.mesh, std::move(placements), src.shape, src.dtype);
  const Placements back = grad_placements(src.placements);
  if (dst->placements == src.placements) {
    // Nothing moves forward, but the gradient still comes back in the input's placements, as
    // PyTorch's redistribute does: a plan's Replicate module input (Megatron's f) turns a
    // Partial input gradient into a Replicate one there, once, instead of letting the Partial
    // flow on into the norms and the residual stream.
    if (!dt.requires_grad() || !torch::autograd::GradMode::is_enabled()) return dt;
    at::Tensor alias;
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      alias = make_dtensor(dtensor_impl(dt)->local(), dtensor_impl(dt)->spec_ptr());
    }
    return link(alias, dt, "RedistributeBackward",
                [back](const at::Tensor& g) { return redistribute_grad(g, back); });
  }
  log_redistribution("redistribute", -1, src.placements, dst->placements);
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    out = make_dtensor(redistribute_local(dtensor_impl(dt)->local(), src, dst->placements), dst);
  }
  return link(out, dt, "RedistributeBackward",
              [back](const at::Tensor& g) { return redistribute_grad(g, back); });
}

at::Tensor from_local(const at::Tensor& local, const mesh::DeviceMesh& mesh, Placements placements,
                      std::optional<std::vector<int64_t>> shape) {
  VESCALE_CHECK(!is_dtensor(local), "from_local: the tensor is already a DTensor");
  check_device(local, mesh, "from_local");
  set_default_mesh(mesh);
  std::vector<int64_t> global = shape ? *shape : local.sizes().vec();
  // Normalize first so that inference below sees non-negative dims.
  auto probe = make_spec(mesh, placements, global, local.scalar_type());
  if (!shape) {
    // Every tensor dim sharded over some mesh dims: the global size is the sum over each group.
    for (int64_t m = 0; m < mesh.ndim(); ++m) {
      const auto& p = probe->placements[m];
      if (!p.is_shard()) continue;
      at::Tensor n =
          at::full({1}, global[p.dim], at::TensorOptions().dtype(at::kLong).device(local.device()));
      mesh.group(mesh.dim_names()[m]).all_reduce(n).wait();
      global[p.dim] = n.item<int64_t>();
    }
    probe = make_spec(mesh, probe->placements, global, local.scalar_type());
  }
  VESCALE_CHECK(c10::IntArrayRef(probe->local_shape()) == local.sizes(),
                "from_local: this rank's tensor has shape ", local.sizes(), " but ",
                probe->to_string(), " gives it ", c10::IntArrayRef(probe->local_shape()),
                "; pass the right global shape, or shards that follow torch.chunk");
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    out = make_dtensor(local.variable_data().contiguous(), probe);
  }
  // The gradient of a Partial term is the whole gradient (Replicate), as in redistribute.
  const Placements target = grad_placements(probe->placements);
  return link(out, local, "FromLocalBackward", [target](const at::Tensor& g) {
    return dtensor_impl(redistribute_grad(g, target))->local();
  });
}

at::Tensor to_local(const at::Tensor& dt) {
  (void)spec_of(dt);  // throws for a plain tensor
  at::Tensor out = dtensor_impl(dt)->local().variable_data();
  auto spec = dtensor_impl(dt)->spec_ptr();
  return link(out, dt, "ToLocalBackward", [spec](const at::Tensor& g) {
    at::Tensor local = is_dtensor(g) ? dtensor_impl(g)->local() : g;
    return make_dtensor(local.contiguous(), spec);
  });
}

at::Tensor to_local(const at::Tensor& dt, Placements grad_placements) {
  const auto& s = spec_of(dt);
  auto grad_spec = make_spec(s.mesh, std::move(grad_placements), s.shape, s.dtype);
  VESCALE_CHECK(c10::IntArrayRef(grad_spec->local_shape()) == c10::IntArrayRef(s.local_shape()),
                "to_local: gradient placements ", to_string(grad_spec->placements),
                " give this rank another shard shape than ", to_string(s.placements));
  at::Tensor out = dtensor_impl(dt)->local().variable_data();
  return link(out, dt, "ToLocalBackward", [grad_spec](const at::Tensor& g) {
    at::Tensor local = is_dtensor(g) ? dtensor_impl(g)->local() : g;
    return make_dtensor(local.contiguous(), grad_spec);
  });
}

at::Tensor full_tensor(const at::Tensor& dt) {
  const auto& s = spec_of(dt);
  return to_local(redistribute(dt, Placements(s.mesh.ndim(), Placement::replicate())));
}

std::string describe(const at::Tensor& dt) {
  const auto& s = spec_of(dt);
  return "DTensor(" + c10::str(c10::IntArrayRef(s.shape)) + ", " + c10::toString(s.dtype) + ", " +
         to_string(s.placements) + " on " + s.mesh.to_string() + ", local " +
         c10::str(dtensor_impl(dt)->local().sizes()) + ")";
}

at::Tensor distribute_tensor(const at::Tensor& full, const mesh::DeviceMesh& mesh,
                             Placements placements, int src_rank) {
  VESCALE_CHECK(!is_dtensor(full),
                "distribute_tensor: the tensor is already a DTensor; use redistribute");
  check_device(full, mesh, "distribute_tensor");
  set_default_mesh(mesh);
  auto spec = make_spec(mesh, std::move(placements), full.sizes().vec(), full.scalar_type());
  at::Tensor data = full.detach().contiguous();
  if (src_rank >= 0) {
    VESCALE_CHECK(src_rank < mesh.size(), "distribute_tensor: src_rank ", src_rank,
                  " is outside the mesh of ", mesh.size());
    data = data.clone();
    // Over the mesh's own group (its ranks in mesh order), not the world.
    mesh.group_over(mesh.dim_names()).broadcast(data, src_rank).wait();
  }
  DTensorSpec replicated{mesh, Placements(mesh.ndim(), Placement::replicate()), spec->shape,
                         spec->dtype};
  at::Tensor out;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    out = make_dtensor(redistribute_local(data, replicated, spec->placements).clone(), spec);
  }
  if (full.requires_grad()) out.set_requires_grad(true);
  return out;
}

BackwardOnCallerThread::BackwardOnCallerThread()
    : previous_(c10::AutogradState::get_tls_state().get_multithreading_enabled()) {
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}

BackwardOnCallerThread::~BackwardOnCallerThread() {
  c10::AutogradState::get_tls_state().set_multithreading_enabled(previous_);
}

}  // namespace vescale::dtensor
