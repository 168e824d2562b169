#include "vescale/plan/parallelize.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include "vescale/common/check.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/nn/routed_experts.h"
#include "vescale/common/logging.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/random/random.h"

namespace vescale::plan {

namespace {

// A module boundary's resharding: DTensors are redistributed; a plain tensor is taken as the
// full value, the same on every rank (a replicated input, e.g. tokens or rope tables).
std::function<at::Tensor(const at::Tensor&)> reshard_to(const mesh::DeviceMesh& mesh,
                                                        dtensor::Placements want,
                                                        std::string where) {
  VESCALE_CHECK(want.size() == static_cast<size_t>(mesh.ndim()), "plan: forward entry '", where,
                "' has ", want.size(), " placements for a ", mesh.ndim(),
                "-D mesh; give one per mesh dim");
  return [mesh, want = std::move(want)](const at::Tensor& x) {
    if (!x.defined()) return x;
    if (dtensor::is_dtensor(x)) return dtensor::redistribute(x, want);
    const dtensor::Placements replicated(want.size(), dtensor::Replicate());
    return dtensor::redistribute(dtensor::from_local(x, mesh, replicated, x.sizes().vec()), want);
  };
}

}  // namespace

std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model, const Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       const ParallelizeOptions& options) {
  // 1. Validate the whole plan against the mesh and the parameters before touching anything.
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  auto params = model.named_parameters(/*recurse=*/true);
  for (const auto& p : params) shapes.emplace_back(p.key(), p.value().sizes().vec());
  auto placements = plan.resolve(mesh.dim_names(), shapes);
  std::vector<std::string> module_names;
  for (const auto& m : model.named_modules(/*name_prefix=*/"", /*include_self=*/true))
    module_names.push_back(m.key());
  plan.check_modules(module_names);

  // 2. Parameters become DTensors in place: each rank keeps its slice of the current values.
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : params) {
      const at::Tensor& t = p.value();
      VESCALE_CHECK(!dtensor::is_dtensor(t), "parallelize: parameter '", p.key(),
                    "' is already a DTensor; parallelize a model once");
      at::Tensor d = dtensor::distribute_tensor(t.detach(), mesh, placements.at(p.key()));
      dtensor::become_dtensor(t, d);
    }
  }
  // 3. The model's init, now on DTensors: every random fill is the consistent one. Parameters
  //    whose phase is before_sharding keep the values they came with.
  if (options.init) {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<at::Tensor, at::Tensor>> keep;  // (parameter, its shard's values)
    for (const auto& p : params)
      if (plan.phase_for(p.key()) == InitPhase::BeforeSharding)
        keep.emplace_back(p.value(), dtensor::to_local(p.value()).clone());
    options.init();
    for (auto& [param, local] : keep) dtensor::to_local(param).copy_(local);
  }

  // One device: back to plain tensors (see ParallelizeOptions::plain_on_one_device).
  if (options.plain_on_one_device && mesh.size() == 1) {
    for (const auto& p : params) dtensor::become_local(p.value());
    for (const auto& m : model.named_modules("", true)) {
      auto* dropout = dynamic_cast<torch::nn::DropoutImpl*>(m.value().get());
      if (dropout == nullptr) continue;
      vescale::nn::ForwardHooks hooks;
      hooks.around = [dropout](const std::vector<at::Tensor>& xs,
                               const vescale::nn::ForwardHooks::Forward&) {
        return random::dropout(xs.at(0), dropout->options.p(), dropout->is_training());
      };
      vescale::nn::add_forward_hook(*dropout, vescale::nn::HookSlot::Plan, std::move(hooks)).detach();
    }
    log::info("parallelize: " + std::to_string(placements.size()) + " parameters on " +
              mesh.to_string() +
              ": one device, plain tensors (init through vescale::random), plan " + plan.source());
    return placements;
  }

  // 4. Forward entries become hooks on the matching modules.
  for (const auto& m : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const ForwardSpec* spec = plan.forward_for(m.key());
    if (spec == nullptr) continue;
    vescale::nn::ForwardHooks hooks;
    for (size_t k = 0; k < spec->input.size(); ++k)
      hooks.inputs.push_back(
          reshard_to(mesh, spec->input[k], m.key() + ".input[" + std::to_string(k) + "]"));
    VESCALE_CHECK(spec->output.size() <= 1, "plan: forward entry '", m.key(),
                  "' lists several outputs; modules here return one tensor");
    if (!spec->output.empty())
      hooks.output = reshard_to(mesh, spec->output[0], m.key() + ".output");
    // The module's for its life (remove_forward_hooks removes it).
    vescale::nn::add_forward_hook(*m.value(), vescale::nn::HookSlot::Plan, std::move(hooks)).detach();
  }
  if (options.boundaries) {
    options.boundaries(model, plan, mesh);
  } else {
    for (const auto& m : model.named_modules("", true))
      VESCALE_CHECK(dynamic_cast<const vescale::nn::RoutedExperts*>(m.value().get()) == nullptr,
                    "parallelize: '", m.key(), "' is a mixture-of-experts module, whose boundary ",
                    "(dispatch, local experts, combine) lives above plan/; parallelize the model ",
                    "with parallel::parallelize (vescale/parallel/parallelize.h)");
  }
  size_t sharded = 0;
  for (auto& [name, pl] : placements)
    for (auto& x : pl) sharded += x.is_shard() ? 1 : 0;
  log::info("parallelize: " + std::to_string(placements.size()) + " parameters on " +
            mesh.to_string() + " (" + std::to_string(sharded) + " shard placements), plan " +
            plan.source());
  return placements;
}

void remove_forward_hooks(torch::nn::Module& model) {
  for (const auto& m : model.named_modules("", true)) {
    vescale::nn::remove_forward_hook(*m.value(), vescale::nn::HookSlot::Plan);
    vescale::nn::remove_forward_hook(*m.value(), vescale::nn::HookSlot::Experts);
  }
}

}  // namespace vescale::plan
