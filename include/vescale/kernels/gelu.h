// GELU with the tanh approximation (GPT-2's), y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))) with
// k = sqrt(2 / pi): the value of at::gelu(x, "tanh").
//
// The torch op vescale::gelu_tanh. On CPU fp32 (and DTensors with CPU fp32 shards, any shard kept)
// it is computed as x * sigmoid(2u), the same function without SLEEF's costly tanh, and forward
// keeps only x (backward evaluates the exp again); with or without grad, so that the value never
// depends on the grad mode. Other inputs (other dtypes or devices) go to at::gelu.
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::kernels {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace vescale::kernels
