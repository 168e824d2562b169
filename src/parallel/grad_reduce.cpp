#include "vescale/parallel/grad_reduce.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "vescale/dtensor/dtensor.h"

namespace vescale::parallel {

int64_t reduce_gradients(torch::nn::Module& model) {
  int64_t reduced = 0;
  for (auto& p : model.parameters(/*recurse=*/true)) {
    at::Tensor& g = p.mutable_grad();
    if (!g.defined() || !dtensor::is_dtensor(g) || !dtensor::is_dtensor(p)) continue;
    // libtorch's AccumulateGrad copies a plain tensor's strided gradient to the parameter's
    // layout. It reads a DTensor's global strides, not its shard's: a shard that is still a
    // strided view would be walked strided by every optimizer op, so copy it contiguous once
    // here. (Weight gradients already come out of mm's backward in the weight's layout, since
    // permuted DTensor views carry permuted strides; this catches what else a model does.)
    // A gradient has no history: to_local needs no detach (a DTensor op of its own).
    const at::Tensor local = dtensor::to_local(g);
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

}  // namespace vescale::parallel
