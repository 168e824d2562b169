#include "vescale/kernels/block_attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "vescale/common/check.h"

namespace vescale::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// k or v [B, Hkv, T, D] with each kv head repeated for its H / Hkv query heads.
at::Tensor repeat_heads(const at::Tensor& t, int64_t heads) {
  const int64_t kv = t.size(1);
  if (kv == heads) return t;
  const int64_t rep = heads / kv;
  return t.unsqueeze(2)
      .expand({t.size(0), kv, rep, t.size(2), t.size(3)})
      .reshape({t.size(0), heads, t.size(2), t.size(3)});
}

// The sum of the gradient of repeated heads back onto their kv head.
at::Tensor sum_heads(const at::Tensor& g, int64_t kv) {
  const int64_t heads = g.size(1);
  if (kv == heads) return g;
  return g.reshape({g.size(0), kv, heads / kv, g.size(2), g.size(3)}).sum(2);
}

// Scaled scores [B, H, Tq, Tk] in fp32, -inf where the causal mask hides the key.
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& q_pos,
                  const at::Tensor& k_pos, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor s = at::matmul(q.to(at::kFloat), k.to(at::kFloat).transpose(-2, -1)) * scale;
  // Positions may live on the host (ring attention keeps them there): the mask goes to s.
  if (causal) s.masked_fill_((k_pos.unsqueeze(0) > q_pos.unsqueeze(1)).to(s.device()), -kInf);
  return s;
}

// exp(s - lse) with rows that see no key (lse = -inf) all zero.
at::Tensor probabilities(const at::Tensor& s, const at::Tensor& lse) {
  const at::Tensor seen = at::isfinite(lse).unsqueeze(-1);
  return at::where(seen, at::exp(s - lse.unsqueeze(-1)), at::zeros({}, s.options()));
}

void check_block(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& q_pos, const at::Tensor& k_pos) {
  VESCALE_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                "block_attention: q, k, v must be [B, H, T, D]");
  VESCALE_CHECK(k.sizes() == v.sizes() && q.size(0) == k.size(0) && q.size(3) == k.size(3) &&
                    q.size(1) % k.size(1) == 0,
                "block_attention: k and v must match and share q's batch and head width, with "
                "q's heads a multiple of theirs; got q ",
                q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  VESCALE_CHECK(q_pos.numel() == q.size(2) && k_pos.numel() == k.size(2),
                "block_attention: one position per query and per key");
}

// Flash attention's kernels (CUDA in bf16/fp16, the CPU's in any float type) cover two masks:
// none, and the diagonal block's (queries and keys at the same positions, each query seeing the
// keys up to its own: flash's top-left is_causal). Every block ring and all-gather attention
// compute is one of them (a run against itself, or against a run wholly before it); they keep
// no scores, where the ATen path below holds a block's [Tq, Tk] scores several times over.
enum class FlashMask { Unsupported, Visible, Diagonal };

FlashMask flash_mask(const at::Tensor& q, const at::Tensor& k_or_v, const at::Tensor& q_pos,
                     const at::Tensor& k_pos, bool causal) {
  const auto dt = q.scalar_type();
  if (k_or_v.scalar_type() != dt || q.size(2) == 0 || k_or_v.size(2) == 0)
    return FlashMask::Unsupported;
  if (q.is_cuda()) {
    if ((dt != at::kBFloat16 && dt != at::kHalf) || q.size(-1) % 8 != 0 || q.size(-1) > 256)
      return FlashMask::Unsupported;
  } else if (!q.is_cpu() || !at::isFloatingType(dt)) {
    return FlashMask::Unsupported;
  }
  if (!causal || k_pos.max().item<int64_t>() <= q_pos.min().item<int64_t>())
    return FlashMask::Visible;
  // The same increasing positions: causal by position is causal by local index.
  if (q_pos.sizes() == k_pos.sizes() && at::equal(q_pos.cpu(), k_pos.cpu()) &&
      (q_pos.numel() < 2 || at::all(q_pos.diff() > 0).item<bool>()))
    return FlashMask::Diagonal;
  return FlashMask::Unsupported;
}

// The log-sum-exp a CPU flash backward reads: its accumulation type (double for double inputs).
at::Tensor lse_for(const at::Tensor& q, const at::Tensor& lse) {
  return lse.to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).contiguous();
}

}  // namespace

AttentionBlock block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& q_pos, const at::Tensor& k_pos, bool causal) {
  check_block(q, k, v, q_pos, k_pos);
  const int64_t heads = q.size(1);
  if (const FlashMask mask = flash_mask(q, k, q_pos, k_pos, causal);
      mask != FlashMask::Unsupported) {
    const at::Tensor qc = q.contiguous(), kc = repeat_heads(k, heads).contiguous(),
                     vc = repeat_heads(v, heads).contiguous();
    const bool diagonal = mask == FlashMask::Diagonal;
    if (q.is_cuda()) {
      auto r = at::_scaled_dot_product_flash_attention(qc, kc, vc, 0.0, diagonal);
      return {std::get<0>(r), std::get<1>(r)};
    }
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(qc, kc, vc, 0.0, diagonal);
    return {out, lse.to(at::kFloat)};
  }
  const at::Tensor s = scores(q, repeat_heads(k, heads), q_pos, k_pos, causal);
  AttentionBlock out;
  out.lse = at::logsumexp(s, -1);
  out.out = at::matmul(probabilities(s, out.lse), repeat_heads(v, heads).to(at::kFloat))
                .to(q.scalar_type());
  return out;
}

bool block_fully_masked(const at::Tensor& q_pos, const at::Tensor& k_pos, bool causal) {
  return causal && k_pos.min().item<int64_t>() > q_pos.max().item<int64_t>();
}

void merge_blocks(AttentionBlock& acc, const AttentionBlock& part) {
  if (!acc.out.defined()) {
    acc = part;
    return;
  }
  const at::Tensor lse = at::logaddexp(acc.lse, part.lse);
  const at::Tensor seen = at::isfinite(lse);
  auto weight = [&](const at::Tensor& l) {
    return at::where(seen, at::exp(l - lse), at::zeros({}, lse.options())).unsqueeze(-1);
  };
  acc.out = (acc.out.to(at::kFloat) * weight(acc.lse) + part.out.to(at::kFloat) * weight(part.lse))
                .to(acc.out.scalar_type());
  acc.lse = lse;
}

AttentionBlockGrads block_attention_backward(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, const at::Tensor& q_pos,
                                             const at::Tensor& k_pos, bool causal,
                                             const at::Tensor& out, const at::Tensor& lse,
                                             const at::Tensor& dout) {
  check_block(q, k, v, q_pos, k_pos);
  const int64_t heads = q.size(1), kv = k.size(1);
  if (const FlashMask mask = flash_mask(q, k, q_pos, k_pos, causal);
      mask != FlashMask::Unsupported) {
    // Flash's backward, like the ATen one below, takes the merged output and log-sum-exp.
    const at::Tensor qc = q.contiguous(), kc = repeat_heads(k, heads).contiguous(),
                     vc = repeat_heads(v, heads).contiguous(),
                     oc = out.to(q.scalar_type()).contiguous(),
                     dc = dout.to(q.scalar_type()).contiguous();
    const bool diagonal = mask == FlashMask::Diagonal;
    at::Tensor dq, dk, dv;
    if (q.is_cuda()) {
      const at::Tensor none;
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
          dc, qc, kc, vc, oc, lse.contiguous(), none, none, q.size(2), k.size(2), 0.0, diagonal,
          at::empty({}, at::kLong), at::empty({}, at::kLong));
    } else {
      std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          dc, qc, kc, vc, oc, lse_for(q, lse), 0.0, diagonal);
    }
    return {dq, sum_heads(dk, kv), sum_heads(dv, kv)};
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const at::Tensor kr = repeat_heads(k, heads).to(at::kFloat),
                   vr = repeat_heads(v, heads).to(at::kFloat);
  const at::Tensor q32 = q.to(at::kFloat), dout32 = dout.to(at::kFloat);
  const at::Tensor p = probabilities(scores(q, kr, q_pos, k_pos, causal), lse);
  // dS = P (dP - rowsum(dO * O)), with dP = dO V^T: the softmax's backward over all key blocks.
  const at::Tensor d = (dout32 * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
  const at::Tensor ds = p * (at::matmul(dout32, vr.transpose(-2, -1)) - d);
  AttentionBlockGrads g;
  g.dq = (at::matmul(ds, kr) * scale).to(q.scalar_type());
  g.dk = sum_heads(at::matmul(ds.transpose(-2, -1), q32) * scale, kv).to(k.scalar_type());
  g.dv = sum_heads(at::matmul(p.transpose(-2, -1), dout32), kv).to(v.scalar_type());
  return g;
}

}  // namespace vescale::kernels
