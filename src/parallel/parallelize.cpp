#include "vescale/parallel/parallelize.h"

#include "vescale/parallel/expert/expert_parallel.h"

namespace vescale::parallel {

std::map<std::string, dtensor::Placements> parallelize(torch::nn::Module& model,
                                                       const plan::Plan& plan,
                                                       const mesh::DeviceMesh& mesh,
                                                       plan::ParallelizeOptions options) {
  options.boundaries = [](torch::nn::Module& m, const plan::Plan& p, const mesh::DeviceMesh& dm) {
    expert::install_moe_boundaries(m, p, dm);
  };
  return plan::parallelize(model, plan, mesh, options);
}

}  // namespace vescale::parallel
