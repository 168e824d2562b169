// torch::nn::Linear whose forward is aten::linear (what Python's F.linear calls). The C++
// frontend's Linear runs matmul and then a separate in-place bias add for inputs of 3+ dims;
// aten::linear folds the bias into one addmm over the flattened rows, so forward does one
// kernel instead of two and backward has no extra add. Same parameters, names and init.
// Through vescale::kernels::linear, whose backward can leave the weight gradient for later
// (zero-bubble pipeline schedules); aten::linear itself otherwise.
#pragma once
#include "vescale/kernels/linear.h"
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

namespace vescale::models {

struct LinearImpl : torch::nn::LinearImpl {
  using torch::nn::LinearImpl::LinearImpl;
  torch::Tensor forward(const torch::Tensor& x) { return vescale::kernels::linear(x, weight, bias); }
};
TORCH_MODULE(Linear);

}  // namespace vescale::models
