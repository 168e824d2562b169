#include "common/train_util.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "vescale/dtensor/dtensor.h"

namespace vescale::testing {

std::string repo_file(const std::string& rel) { return std::string(VESCALE_SOURCE_DIR) + "/" + rel; }

std::map<std::string, at::Tensor> full_params(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& p : m.named_parameters()) {
    const at::Tensor& t = p.value();
    out[p.key()] = (dtensor::is_dtensor(t) ? dtensor::full_tensor(t.detach()) : t.detach()).clone();
  }
  return out;
}

at::Tensor model_input(const at::Tensor& full, const mesh::DeviceMesh& mesh) {
  dtensor::Placements pl(mesh.ndim(), dtensor::Replicate());
  at::Tensor local = full;
  for (int64_t d = 0; d < mesh.ndim(); ++d) {
    if (mesh.dim_names()[d] != "dp") continue;
    pl[d] = dtensor::Shard(0);
    local = full.chunk(mesh.size("dp"), 0)[mesh.coordinate("dp")];
  }
  return dtensor::from_local(local.contiguous(), mesh, pl, full.sizes().vec());
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.flatten(0, 1), targets.flatten(0, 1));
}

}  // namespace vescale::testing
