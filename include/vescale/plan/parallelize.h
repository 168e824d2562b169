// parallelize(model, plan, mesh): the plan, not the model, decides the parallelism (docs/plan.md).
// Parameters become DTensors in place (the model's own members see them), the model's init
// can rerun on them through the consistent RNG, and the plan's `forward` entries become
// forward hooks (models/module_hooks.h) that reshard module inputs and outputs.
#pragma once
#include <functional>
#include <map>
#include <string>

#include "vescale/dtensor/placement.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace torch::nn {
class Module;
}

namespace vescale::plan {

struct ParallelizeOptions {
  // Reruns the model's own initialisation once the parameters are DTensors, so each random
  // fill goes through the Philox RNG and equals the same init on one device bitwise
  // (e.g. [&] { model->init_weights(); }). Without it, every rank keeps its slice of the
  // values the model already holds (which must then be equal on all ranks).
  std::function<void()> init;
  // On a 1-device mesh every placement is the whole tensor, so DTensors would only add
  // dispatch overhead (and lose fused kernels, like CPU flash attention). With this set, a
  // 1-device mesh makes parallelize a no-op apart from the init: the parameters become plain
  // tensors again after it (bitwise the values the init gave the DTensors), no forward hooks
  // are installed, and torch::nn::Dropout modules draw their masks from vescale::random (as
  // DTensor dropout does), so training matches the same plan on any world size.
  bool plain_on_one_device = false;
};

// Returns each parameter's placements. On a 1-rank mesh the parameters still become
// (trivially placed) DTensors unless options.plain_on_one_device is set.
std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model, const Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       const ParallelizeOptions& options = {});

// Module boundaries implemented by layers above plan/ (parallel/expert: the mixture-of-experts
// dispatch of the plan's "moe" entries). Each registered installer runs at the end of every
// parallelize on a mesh of more than one rank, once the parameters are DTensors and the plan's
// forward hooks are in place. Register at load time (a static initializer).
using BoundaryInstaller =
    std::function<void(torch::nn::Module& model, const Plan& plan, const mesh::DeviceMesh& mesh)>;
void register_boundary_installer(BoundaryInstaller installer);

// Removes the forward hooks parallelize installed (the parameters stay DTensors).
void remove_forward_hooks(torch::nn::Module& model);

}  // namespace vescale::plan
