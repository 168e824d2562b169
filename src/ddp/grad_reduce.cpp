#include "vescale/ddp/grad_reduce.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "vescale/dtensor/dtensor.h"

namespace vescale::ddp {

int64_t reduce_gradients(torch::nn::Module& model) {
  int64_t reduced = 0;
  for (auto& p : model.parameters(/*recurse=*/true)) {
    at::Tensor& g = p.mutable_grad();
    if (!g.defined() || !dtensor::is_dtensor(g) || !dtensor::is_dtensor(p)) continue;
    const auto& want = dtensor::spec_of(p).placements;
    if (dtensor::spec_of(g).placements == want) continue;
    g = dtensor::redistribute(g.detach(), want);
    ++reduced;
  }
  return reduced;
}

}  // namespace vescale::ddp
