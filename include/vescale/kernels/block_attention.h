// Attention of a block of queries to a block of keys, each with its tokens' global positions,
// returning the output and each query row's log-sum-exp: the unit that ring and all-gather
// attention (context parallelism, parallel/context/) compose. Partial results over different key
// blocks merge by the online-softmax rule; the backward of a block takes the merged output and
// log-sum-exp (as flash attention's does), so no probabilities are kept between blocks.
// Plain tensors, below autograd. Blocks whose mask is none or the diagonal's (every block ring
// and all-gather attention compute) run flash attention's kernels, which keep no scores: the
// CPU's in any float type, CUDA's in bf16 or fp16. Other blocks (any positions) run ATen ops in
// fp32 on any device. The contract is the same either way.
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::kernels {

struct AttentionBlock {
  at::Tensor out;  // [B, H, Tq, D]: softmax over this block's keys, times its values
  at::Tensor lse;  // [B, H, Tq] fp32: log-sum-exp of the scaled scores; -inf where no key is seen
};

// q [B, H, Tq, D]; k, v [B, Hkv, Tk, D] with H a multiple of Hkv (grouped-query heads);
// q_pos [Tq], k_pos [Tk] int64 global positions. Causal: key j is seen by query i when
// k_pos[j] <= q_pos[i]. Scores scaled by 1 / sqrt(D).
AttentionBlock block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& q_pos, const at::Tensor& k_pos, bool causal);

// Whether a causal block has no visible key at all (every key after every query): ring
// attention skips it.
bool block_fully_masked(const at::Tensor& q_pos, const at::Tensor& k_pos, bool causal);

// acc <- the attention over acc's keys and part's together (online softmax); an undefined acc
// takes part.
void merge_blocks(AttentionBlock& acc, const AttentionBlock& part);

struct AttentionBlockGrads {
  at::Tensor dq;      // [B, H, Tq, D]
  at::Tensor dk, dv;  // [B, Hkv, Tk, D]
};

// One block's share of the gradients, given the merged output `out`, log-sum-exp `lse` and the
// output's gradient `dout` of these query rows: summed over every key block, the dq is the full
// attention's and each block's dk, dv are its keys' full gradients.
AttentionBlockGrads block_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& q_pos,
                                             const at::Tensor& k_pos, bool causal,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout);

}  // namespace vescale::kernels
