#include "vescale/parallel/context/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <vector>

#include "vescale/common/check.h"
#include "vescale/kernels/block_attention.h"
#include "vescale/timeline/recorder.h"

namespace vescale::parallel::context {
namespace {

namespace k = vescale::kernels;

// A chunk's contiguous runs of rows: (first local row, global positions).
struct Run {
  int64_t row = 0, len = 0;
  at::Tensor pos;
};

std::vector<Run> runs_of(const SequenceSplit& split, int64_t rank) {
  const at::Tensor pos = split.positions(rank);
  const int64_t n = split.runs(), len = pos.numel() / n;
  std::vector<Run> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({i * len, len, pos.narrow(0, i * len, len)});
  return out;
}

at::Tensor rows(const at::Tensor& t, const Run& r) { return t.narrow(2, r.row, r.len); }

// Tags of the ring's transfers: one per step and kind, so no two in flight can match up wrong.
int tag(int kind, int64_t step) { return static_cast<int>(kind * 4096 + step); }
constexpr int kForwardKv = 1, kBackwardKv = 2, kBackwardGrads = 3;

// One ring step's transfer: send `t` to the next rank, receive the previous rank's into `next`.
struct Pass {
  at::Tensor next;
  dist::Work send, recv;
  void start(const at::Tensor& t, dist::ProcessGroup& group, int kind, int64_t step) {
    static const uint32_t kRing = timeline::intern("ring attention");
    timeline::CommContext context(kRing, static_cast<int32_t>(step));
    const int cp = group.size(), r = group.rank();
    next = at::empty_like(t);
    send = group.send(t, (r + 1) % cp, tag(kind, step));
    recv = group.recv(next, (r - 1 + cp) % cp, tag(kind, step));
  }
  at::Tensor finish() {
    send.wait();
    recv.wait();
    return next;
  }
};

// What a forward keeps for its backward besides tensors: the split, the group (the caller keeps
// it alive), the mask.
struct Call {
  SequenceSplit split;
  dist::ProcessGroup* group;
  bool causal;
};
void save_call(torch::autograd::AutogradContext* ctx, const SequenceSplit& split,
               dist::ProcessGroup* group, bool causal) {
  ctx->saved_data["cp"] = split.cp;
  ctx->saved_data["seq_len"] = split.seq_len;
  ctx->saved_data["zigzag"] = split.zigzag;
  ctx->saved_data["causal"] = causal;
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
}
Call saved_call(torch::autograd::AutogradContext* ctx) {
  return {SequenceSplit{ctx->saved_data["cp"].toInt(), ctx->saved_data["seq_len"].toInt(),
                        ctx->saved_data["zigzag"].toBool()},
          reinterpret_cast<dist::ProcessGroup*>(ctx->saved_data["group"].toInt()),
          ctx->saved_data["causal"].toBool()};
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& key, const at::Tensor& value,
                            const SequenceSplit& split, dist::ProcessGroup* group, bool causal) {
    const int64_t cp = group->size(), r = group->rank();
    const auto mine = runs_of(split, r);
    at::Tensor kv = at::stack({key, value}).contiguous();
    std::vector<k::AttentionBlock> acc(mine.size());
    for (int64_t s = 0; s < cp; ++s) {
      Pass pass;
      if (s + 1 < cp) pass.start(kv, *group, kForwardKv, s);  // overlaps this step's blocks
      const auto theirs = runs_of(split, (r - s + cp) % cp);
      for (size_t i = 0; i < mine.size(); ++i)
        for (const Run& kr : theirs) {
          if (k::block_fully_masked(mine[i].pos, kr.pos, causal)) continue;
          k::merge_blocks(acc[i], k::block_attention(rows(q, mine[i]), rows(kv[0], kr),
                                                     rows(kv[1], kr), mine[i].pos, kr.pos, causal));
        }
      if (s + 1 < cp) kv = pass.finish();
    }
    std::vector<at::Tensor> outs, lses;
    for (auto& a : acc) outs.push_back(a.out), lses.push_back(a.lse);
    at::Tensor out = at::cat(outs, 2), lse = at::cat(lses, 2);
    ctx->save_for_backward({q, key, value, out, lse});
    save_call(ctx, split, group, causal);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &out = saved[3], &lse = saved[4];
    const auto [split, group, causal] = saved_call(ctx);
    const int64_t cp = group->size(), r = group->rank();
    const at::Tensor dout = grads[0].contiguous();
    const auto mine = runs_of(split, r);
    at::Tensor kv = at::stack({saved[1], saved[2]}).contiguous();
    at::Tensor dq = at::zeros_like(q, q.options().dtype(at::kFloat));
    // The accumulated dK, dV of the keys in hand travel with them; after cp steps each rank's
    // come home.
    at::Tensor dkv = at::zeros_like(kv, kv.options().dtype(at::kFloat));
    for (int64_t s = 0; s < cp; ++s) {
      Pass kv_pass;
      if (s + 1 < cp) kv_pass.start(kv, *group, kBackwardKv, s);
      const auto theirs = runs_of(split, (r - s + cp) % cp);
      for (const Run& qr : mine)
        for (const Run& kr : theirs) {
          if (k::block_fully_masked(qr.pos, kr.pos, causal)) continue;
          const auto g = k::block_attention_backward(rows(q, qr), rows(kv[0], kr), rows(kv[1], kr),
                                                     qr.pos, kr.pos, causal, rows(out, qr),
                                                     lse.narrow(2, qr.row, qr.len), rows(dout, qr));
          rows(dq, qr).add_(g.dq);
          rows(dkv[0], kr).add_(g.dk);
          rows(dkv[1], kr).add_(g.dv);
        }
      if (s + 1 < cp) kv = kv_pass.finish();
      if (cp > 1) {  // on one rank the accumulator is already home
        Pass grad_pass;
        grad_pass.start(dkv, *group, kBackwardGrads, s);
        dkv = grad_pass.finish();
      }
    }
    return {dq.to(q.scalar_type()),
            dkv[0].to(saved[1].scalar_type()),
            dkv[1].to(saved[2].scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

// Every rank's runs in the gathered keys (group-rank order, each rank's Tl rows in its order).
std::vector<Run> gathered_runs(const SequenceSplit& split) {
  std::vector<Run> all;
  const int64_t tl = split.seq_len / split.cp;
  for (int64_t r = 0; r < split.cp; ++r)
    for (Run run : runs_of(split, r)) {
      run.row += r * tl;
      all.push_back(run);
    }
  return all;
}

// [2, B, Hkv, Tl, D] from every rank -> [2, B, Hkv, cp x Tl, D] in group-rank order.
at::Tensor gather_kv(const at::Tensor& kv, dist::ProcessGroup& group) {
  static const uint32_t kGather = timeline::intern("all-gather attention");
  timeline::CommContext context(kGather);
  const int64_t cp = group.size();
  at::Tensor out =
      at::empty({cp * kv.size(0), kv.size(1), kv.size(2), kv.size(3), kv.size(4)}, kv.options());
  group.all_gather(out, kv).wait();  // rank r's [2, ...] at rows 2r, 2r + 1
  return out.view({cp, 2, kv.size(1), kv.size(2), kv.size(3), kv.size(4)})
      .permute({1, 2, 3, 0, 4, 5})
      .reshape({2, kv.size(1), kv.size(2), cp * kv.size(3), kv.size(4)});
}

struct AllGatherAttention : torch::autograd::Function<AllGatherAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& key, const at::Tensor& value,
                            const SequenceSplit& split, dist::ProcessGroup* group, bool causal) {
    const auto mine = runs_of(split, group->rank());
    const at::Tensor kv = gather_kv(at::stack({key, value}).contiguous(), *group);
    const std::vector<Run> theirs = gathered_runs(split);
    std::vector<at::Tensor> outs, lses;
    for (const Run& qr : mine) {
      // Run by run, as the ring goes: each block is then unmasked, the diagonal, or skipped
      // (flash attention's kernels: no scores kept).
      k::AttentionBlock acc;
      for (const Run& kr : theirs)
        if (!k::block_fully_masked(qr.pos, kr.pos, causal))
          k::merge_blocks(acc, k::block_attention(rows(q, qr), rows(kv[0], kr), rows(kv[1], kr),
                                                  qr.pos, kr.pos, causal));
      outs.push_back(acc.out), lses.push_back(acc.lse);
    }
    at::Tensor out = at::cat(outs, 2), lse = at::cat(lses, 2);
    ctx->save_for_backward({q, kv, out, lse});
    save_call(ctx, split, group, causal);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &kv = saved[1], &out = saved[2], &lse = saved[3];
    const auto [split, group, causal] = saved_call(ctx);
    const at::Tensor dout = grads[0].contiguous();
    std::vector<at::Tensor> dqs;
    at::Tensor dkv = at::zeros_like(kv, kv.options().dtype(at::kFloat));
    const std::vector<Run> theirs = gathered_runs(split);
    for (const Run& qr : runs_of(split, group->rank())) {
      at::Tensor dq = at::zeros_like(rows(q, qr), q.options().dtype(at::kFloat));
      for (const Run& kr : theirs) {
        if (k::block_fully_masked(qr.pos, kr.pos, causal)) continue;
        const auto g = k::block_attention_backward(rows(q, qr), rows(kv[0], kr), rows(kv[1], kr),
                                                   qr.pos, kr.pos, causal, rows(out, qr),
                                                   lse.narrow(2, qr.row, qr.len), rows(dout, qr));
        dq.add_(g.dq);
        rows(dkv[0], kr).add_(g.dk);
        rows(dkv[1], kr).add_(g.dv);
      }
      dqs.push_back(dq);
    }
    // Each rank's keys' gradients, summed over the ranks whose queries saw them: [2, B, Hkv,
    // cp x Tl, D] back to rank-major pieces, reduce-scattered.
    const int64_t cp = split.cp, tl = kv.size(3) / cp;
    const at::Tensor pieces = dkv.view({2, kv.size(1), kv.size(2), cp, tl, kv.size(4)})
                                  .permute({3, 0, 1, 2, 4, 5})
                                  .reshape({cp * 2, kv.size(1), kv.size(2), tl, kv.size(4)})
                                  .contiguous();
    at::Tensor mine = at::empty({2, kv.size(1), kv.size(2), tl, kv.size(4)}, pieces.options());
    {
      static const uint32_t kScatter = timeline::intern("all-gather attention");
      timeline::CommContext context(kScatter);
      group->reduce_scatter(mine, pieces).wait();
    }
    return {at::cat(dqs, 2).to(q.scalar_type()),
            mine[0].to(kv.scalar_type()),
            mine[1].to(kv.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

void SequenceSplit::validate() const {
  const int64_t chunks = zigzag ? 2 * cp : cp;
  VESCALE_CHECK(cp >= 1 && seq_len > 0 && seq_len % chunks == 0,
                "context parallelism: the sequence length (", seq_len, ") must divide into ",
                chunks, " chunks (", zigzag ? "2 x cp with zigzag balance" : "cp", ", cp = ", cp,
                "); set train.seq_len to a multiple of ", chunks);
}

at::Tensor SequenceSplit::positions(int64_t rank) const {
  validate();
  VESCALE_CHECK(rank >= 0 && rank < cp, "context parallelism: rank ", rank, " of cp = ", cp);
  if (!zigzag) {
    const int64_t n = seq_len / cp;
    return at::arange(rank * n, (rank + 1) * n, at::kLong);
  }
  const int64_t c = seq_len / (2 * cp);
  return at::cat({at::arange(rank * c, (rank + 1) * c, at::kLong),
                  at::arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c, at::kLong)});
}

namespace {
// The checks both entries make before any transfer: a mismatch found later would hang a rank.
void check_call(const char* who, const at::Tensor& q, const SequenceSplit& split,
                const dist::ProcessGroup& group) {
  VESCALE_CHECK(group.size() == split.cp, who, ": the group has ", group.size(),
                " ranks but the split is over cp = ", split.cp);
  split.validate();
  VESCALE_CHECK(q.dim() == 4 && q.size(2) == split.seq_len / split.cp, who,
                ": q must be [B, H, seq_len / cp, D] = [.., .., ", split.seq_len / split.cp,
                ", ..], got ", q.sizes());
}
}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const SequenceSplit& split, dist::ProcessGroup& group, bool causal) {
  check_call("ring_attention", q, split, group);
  return RingAttention::apply(q, k, v, split, &group, causal);
}

at::Tensor allgather_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const SequenceSplit& split, dist::ProcessGroup& group, bool causal) {
  check_call("allgather_attention", q, split, group);
  return AllGatherAttention::apply(q, k, v, split, &group, causal);
}

}  // namespace vescale::parallel::context
