// LayerNorm over the last dimension with a weight and a bias (GPT-2's ln_1, ln_2, ln_f): the value
// of at::layer_norm(x, {C}, weight, bias, eps).
//
// The torch op vescale::layer_norm. On CPU fp32 (and DTensors with CPU fp32 shards, which keep
// shards of the leading dims) it runs our row kernel, 16 wide on AVX-512 (ATen's CPU LayerNorm
// computes its row moments 8 wide with Welford updates); anything else (other dtypes or devices, no
// affine parameters) goes to at::layer_norm.
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::kernels {

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps);

}  // namespace vescale::kernels
