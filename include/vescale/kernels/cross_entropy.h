// The training loss: mean cross-entropy of logits [N, V] against class indices [N], the value
// at::cross_entropy gives (no class weights, no ignore_index, no label smoothing).
//
// The torch op vescale::cross_entropy, fused for CPU fp32. Forward makes one pass over each row for
// its logsumexp and keeps only that ([N, 2]: max and log-sum); backward writes the gradient
// (softmax - onehot) * grad / N in one pass. ATen's log_softmax + nll_loss writes the [N, V]
// log-probabilities in forward, and backward zero-fills an [N, V] buffer, scatters into it and runs
// log_softmax's backward over two [N, V] tensors. Other inputs (CUDA, other dtypes) and DTensors go
// to at::cross_entropy: tensor-parallel logits are vocab-sharded, and the loss over vocab shards is
// the log_softmax/nll_loss rules' (Megatron's vocab-parallel cross-entropy, with its collectives).
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::kernels {

// logits [N, V] (floating), targets [N] (int64, each in [0, V)) -> a 0-dim loss tensor that
// backpropagates into logits.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

}  // namespace vescale::kernels
