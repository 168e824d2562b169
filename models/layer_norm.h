// LayerNorm over the last dimension with a weight and a bias (GPT-2's ln_1, ln_2, ln_f): the value
// of at::layer_norm. On CPU fp32 it runs its own row kernel, 16 wide on AVX-512 (ATen's CPU
// LayerNorm computes its row moments 8 wide with Welford updates); anything else (other dtypes or
// devices, DTensors, a multi-dimensional normalized shape, no affine parameters) goes to
// at::layer_norm.
#pragma once
#include <ATen/core/Tensor.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace models {

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);

// torch::nn::LayerNorm whose forward is models::layer_norm: same parameters, names and init.
struct LayerNormImpl : torch::nn::LayerNormImpl {
  using torch::nn::LayerNormImpl::LayerNormImpl;
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(LayerNorm);

}  // namespace models
