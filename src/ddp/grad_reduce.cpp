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
    // libtorch's AccumulateGrad copies a plain tensor's strided gradient (a weight's comes out
    // of mm's backward as a transposed view) to the parameter's layout. A DTensor reports
    // contiguous global strides, so its shard is kept as the view and every optimizer op then
    // walks it strided: copy it to a contiguous shard once here, as libtorch does for plain ones.
    const at::Tensor local = dtensor::to_local(g.detach());
    if (!local.is_contiguous()) {
      const auto& s = dtensor::spec_of(g);
      g = dtensor::from_local(local.contiguous(), s.mesh, s.placements, s.shape);
    }
    const auto& want = dtensor::spec_of(p).placements;
    if (dtensor::spec_of(g).placements == want) continue;
    g = dtensor::redistribute(g.detach(), want);
    ++reduced;
  }
  return reduced;
}

}  // namespace vescale::ddp
