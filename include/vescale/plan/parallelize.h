// parallelize(model, plan, mesh): the plan, not the model, decides the parallelism (DESIGN §4).
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
};

// Returns each parameter's placements. On a 1-rank mesh the parameters still become
// (trivially placed) DTensors, so one code path serves every world size.
std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model, const Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       const ParallelizeOptions& options = {});

// Removes the forward hooks parallelize installed (the parameters stay DTensors).
void remove_forward_hooks(torch::nn::Module& model);

}  // namespace vescale::plan
