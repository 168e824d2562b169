// GELU with the tanh approximation (GPT-2's), y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))) with
// k = sqrt(2 / pi): the value of at::gelu(x, "tanh"). On CPU fp32 (with or without grad, so
// that the value never depends on the grad mode) it is computed as x * sigmoid(2u), the same
// function without SLEEF's costly tanh, and forward keeps only x (backward evaluates the exp
// again). Other inputs (other dtypes or devices, DTensors) go to at::gelu.
#pragma once
#include <ATen/core/Tensor.h>

namespace models {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace models
