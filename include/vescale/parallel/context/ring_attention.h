// Context parallelism's attention (issue 35, docs/context_parallel.md): a sequence split over the
// ranks of a cp group, each holding its chunk of queries, keys and values, attends to the whole
// sequence. `ring`: K and V travel around the ring by P2P while each rank attends to the block it
// holds (kernels/block_attention.h), the partial results merged by the online-softmax rule;
// backward sends the dK/dV accumulators around the ring with them. Each transfer is posted before
// the block it overlaps is computed. `allgather`: K and V gathered from every rank at once (cheap
// when KV heads are few: grouped-query attention), one block per run of local queries;
// backward reduce-scatters dK and dV.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "vescale/dist/process_group.h"

namespace vescale::parallel::context {

// How a sequence of seq_len tokens is cut over cp ranks: cp equal chunks in order, or (zigzag)
// 2cp chunks with rank r holding chunks r and 2cp-1-r, so that under a causal mask every rank
// does the same attention work.
struct SequenceSplit {
  int64_t cp = 1;
  int64_t seq_len = 0;
  bool zigzag = true;
  // Throws naming the fix when seq_len does not divide into the chunks.
  void validate() const;
  // Rank r's tokens' global positions, in its local order: [seq_len / cp] int64.
  at::Tensor positions(int64_t rank) const;
  // The contiguous runs of rank r's positions: 1 (plain) or 2 (zigzag), as (first, length).
  int64_t runs() const { return zigzag ? 2 : 1; }
};

// Collective over `group` (its size is split.cp; every rank calls it), differentiable: q
// [B, H, T/cp, D], k and v [B, Hkv, T/cp, D] this rank's chunk in split's order; returns this
// rank's rows of the attention over the whole sequence (causal by global position, or not). The
// group must outlive the backward.
at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const SequenceSplit& split, dist::ProcessGroup& group,
                          bool causal = true);

// The same value and gradients as ring_attention, by an all-gather of K and V over `group` and a
// reduce-scatter of their gradients. Collective, differentiable; the group must outlive the
// backward.
at::Tensor allgather_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const SequenceSplit& split, dist::ProcessGroup& group,
                               bool causal = true);

}  // namespace vescale::parallel::context
