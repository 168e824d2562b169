// torch::nn::LayerNorm whose forward is vescale::kernels::layer_norm (GPT-2's ln_1, ln_2, ln_f):
// same parameters, names and init; a multi-dimensional normalized shape or no affine parameters
// keep torch::nn::LayerNorm's forward.
#pragma once
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace vescale::models {

struct LayerNormImpl : torch::nn::LayerNormImpl {
  using torch::nn::LayerNormImpl::LayerNormImpl;
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(LayerNorm);

}  // namespace vescale::models
