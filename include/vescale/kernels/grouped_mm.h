// One matmul per group of rows, as one op: the experts of a mixture-of-experts layer on tokens
// grouped by expert (docs/moe.md). x [M, in] holds E groups of rows in order, counts[e] rows for
// group e; w [E, out, in]; returns y [M, out] with y[rows of e] = x[rows of e] w[e]^T.
// Differentiable in x and w through one autograd node (not E linear calls). CPU and fp32 CUDA:
// one matmul per non-empty group into slices of the output; bf16 CUDA: at::_grouped_mm.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace vescale::kernels {

at::Tensor grouped_mm(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts);

}  // namespace vescale::kernels
