// parallelize(model, plan, mesh): the plan, not the model, decides the parallelism (docs/plan.md).
// Parameters become DTensors in place (the model's own members see them), the model's init
// can rerun on them through the consistent RNG, and the plan's `forward` entries become
// forward hooks (nn/module_hooks.h, the Plan slot) that reshard module inputs and outputs.
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
  // Module boundaries implemented above plan/: called at the end (unless the one-device case
  // returned first), once the parameters are DTensors and the plan's hooks are in place.
  // parallel::parallelize passes the mixture-of-experts boundary (parallel/parallelize.h); a
  // model with nn::RoutedExperts modules and no boundaries is an error naming it.
  std::function<void(torch::nn::Module& model, const Plan& plan, const mesh::DeviceMesh& mesh)>
      boundaries = {};
};

// Returns each parameter's placements. On a 1-rank mesh the parameters still become
// (trivially placed) DTensors unless options.plain_on_one_device is set.
std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model, const Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       const ParallelizeOptions& options = {});

// Removes the forward hooks parallelize installed on this model's modules, its links in the
// Plan and Experts slots (nn/module_hooks.h); other users' links, and other models', stay. The
// parameters stay DTensors.
void remove_forward_hooks(torch::nn::Module& model);

}  // namespace vescale::plan
