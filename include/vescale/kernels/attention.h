// Causal self-attention, softmax(q k^T / sqrt(d)) v with a causal mask: the value of
// at::scaled_dot_product_attention(q, k, v, {}, dropout_p, /*is_causal=*/true).
//
// The torch op vescale::causal_attention (kernels/README in docs/architecture.md). For CPU fp32
// tensors, and for DTensors whose shards are CPU fp32, of short sequences (the [B, H, T, T]
// probabilities fit in 64 MB) and without dropout, it runs our kernel: per head, row blocks of the
// lower triangle as small GEMMs (ATen's brgemm), the probabilities kept for backward (4 GEMMs per
// block, no recomputation). ATen's CPU flash kernel works in small tiles and recomputes the scores
// in backward, which at head dims of 16-64 runs well below the GEMMs' rate (docs/models.md, "Causal
// attention"). DTensors keep batch and head shards (a tensor-parallel run calls the same kernel on
// its heads); anything else (CUDA, other dtypes, dropout, long sequences) is
// at::scaled_dot_product_attention.
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::kernels {

// q, k, v: [B, H, T, D], same H, T and D (grouped-query heads repeated by the caller).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double dropout_p = 0.0);

// GPT-2's packed form: qkv [B, T, 3C] (q, k, v side by side, n_head heads each) -> [B, T, C] with
// the heads merged. The value of splitting qkv into heads, causal_attention, and merging; on the
// kernel's path backward writes qkv's gradient as one buffer instead of three that autograd then
// concatenates. A DTensor qkv keeps a batch shard; other shards gather (the three parts of a
// column-parallel qkv are not head-aligned).
at::Tensor causal_attention_packed(const at::Tensor& qkv, int64_t n_head, double dropout_p = 0.0);

}  // namespace vescale::kernels
