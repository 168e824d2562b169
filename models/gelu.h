// GELU with the tanh approximation (GPT-2's), y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))) with
// k = sqrt(2 / pi): the value of at::gelu(x, "tanh"). On CPU fp32 under autograd, forward also
// keeps the tanh it computed, so backward is arithmetic only; ATen's gelu_backward evaluates
// the tanh again, which costs as much as the forward. Other inputs (no grad, other dtypes or
// devices, DTensors) go to at::gelu.
#pragma once
#include <ATen/core/Tensor.h>

namespace models {

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace models
