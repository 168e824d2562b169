// parallel::parallelize: a whole model under its plan. plan::parallelize turns the parameters
// into DTensors and hooks the plan's module boundaries; the boundaries implemented above plan/
// (the mixture-of-experts dispatch of parallel/expert) are added here, so plan/ needs no
// registry reaching up. Use this one for any model; plan::parallelize refuses a model with
// experts modules.
#pragma once
#include <map>
#include <string>

#include "vescale/plan/parallelize.h"

namespace vescale::parallel {

// plan::parallelize(model, plan, mesh, options) with the experts' boundary on every
// nn::RoutedExperts module (expert/expert_parallel.h). Collective over the mesh.
std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model,
                                                       const plan::Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       plan::ParallelizeOptions options = {});

}  // namespace vescale::parallel
