// scaled_dot_product_attention as one op. sdpa is CompositeImplicit: left alone it decomposes
// above us into its math path, whose matmuls fold (batch, heads) into one dim, which a head
// shard cannot follow, so every q/k/v is gathered (4 all-gathers per layer under TP). libtorch
// asks a per-device stub which fused kernel to use; for DTensors we answer "overrideable", so
// sdpa arrives here as _scaled_dot_product_fused_attention_overrideable (and its backward),
// and the rule below keeps batch and head shards: attention is independent per (batch, head).
// The local work is the CPU flash kernel. Masks, dropout (its random stream must be the
// consistent one), enable_gqa, a value head dim unlike the query's, and CUDA meshes keep the
// math path.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>

#include <tuple>

#include "dtensor/dtensor_impl.h"
#include "dtensor/propagation.h"
#include "dtensor/rules/rule_utils.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool /*is_causal*/,
                   std::optional<double> /*scale*/, bool enable_gqa) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if ((attn_mask && attn_mask->defined()) || dropout_p > 0.0 || enable_gqa) return math;
  for (const auto* t : {&query, &key, &value})
    if (!is_dtensor(*t) || spec_of(*t).mesh.device_type() != "cpu" || t->dim() != 4) return math;
  const auto dt = query.scalar_type();
  if (dt != at::kFloat && dt != at::kDouble && dt != at::kBFloat16 && dt != at::kHalf) return math;
  if (key.scalar_type() != dt || value.scalar_type() != dt) return math;
  // What the CPU flash kernel needs (sdp_utils_cpp's checks for it): equal head counts (no
  // enable_gqa), one head dim for q, k and v, non-empty sequences, flash not turned off.
  if (key.size(1) != query.size(1) || value.size(1) != query.size(1)) return math;
  if (key.size(3) != query.size(3) || value.size(3) != query.size(3)) return math;
  if (query.size(2) == 0 || key.size(2) == 0) return math;
  if (!at::globalContext().userEnabledFlashSDP()) return math;
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// Per mesh dim: a batch (0) or head (1) shard of the query is kept for every attention tensor;
// anything else (a sequence or head-dim shard, Partial) gathers to Replicate.
Placements attention_placements(const DTensorSpec& q) { return shards_below(q, 2); }

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias?, dropout_p,
// is_causal, return_debug_mask, *, scale?) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q,
// max_k, philox_seed, philox_offset, debug_attn_mask)
Strategy sdpa_forward(const OpCall& call) {
  const auto& q = call.specs[0];
  const Placements p = attention_placements(q);
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  // The tensor returns; only output and logsumexp are defined.
  st.outputs.assign(7, replicate_all(call.mesh_ndim()));
  st.outputs[0] = st.outputs[1] = p;
  const auto& v = call.specs[2];
  std::vector<int64_t> out_shape = q.shape;
  out_shape[3] = v.shape[3];
  st.output_shapes = {out_shape, {q.shape[0], q.shape[1], q.shape[2]}, {0}, {0}, {0}, {0}, {0}};
  st.local_fn = [](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, 8);
    const at::Tensor q = a[0].toTensor(), k = a[1].toTensor(), v = a[2].toTensor();
    const double dropout_p = a[4].toDouble();
    const bool is_causal = a[5].toBool();
    const auto scale = a[7].toOptional<double>();
    torch::jit::drop(stack, 8);
    at::Tensor out, lse;
    if (q.numel() == 0) {  // no heads (or batch rows) here: uneven shards, torch.chunk style
      out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options());
      lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat));
    } else {
      std::tie(out, lse) =
          at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, {}, scale);
    }
    stack.emplace_back(out);
    stack.emplace_back(lse);
    stack.emplace_back(at::Tensor());  // cum_seq_q
    stack.emplace_back(at::Tensor());  // cum_seq_k
    stack.emplace_back(c10::SymInt(q.size(2)));
    stack.emplace_back(c10::SymInt(k.size(2)));
    stack.emplace_back(at::Tensor());  // philox_seed: no dropout here
    stack.emplace_back(at::Tensor());  // philox_offset
    stack.emplace_back(at::Tensor());  // debug_attn_mask
  };
  return st;
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value,
// attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
// is_causal, philox_seed, philox_offset, *, scale) -> (grad_query, grad_key, grad_value,
// grad_attn_bias)
Strategy sdpa_backward(const OpCall& call) {
  const Placements p = attention_placements(call.specs[1]);
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  st.outputs.assign(4, p);
  st.outputs[3] = replicate_all(call.mesh_ndim());  // no attn_bias, no gradient
  st.output_shapes = {call.specs[1].shape, call.specs[2].shape, call.specs[3].shape, {0}};
  st.local_fn = [](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, 17);
    const at::Tensor grad = a[0].toTensor(), q = a[1].toTensor(), k = a[2].toTensor(),
                     v = a[3].toTensor();
    const at::Tensor out = a[6].toTensor(), lse = a[7].toTensor();
    const double dropout_p = a[12].toDouble();
    const bool is_causal = a[13].toBool();
    const auto scale = a[16].toOptional<double>();
    torch::jit::drop(stack, 17);
    at::Tensor gq, gk, gv;
    if (q.numel() == 0) {
      gq = at::zeros_like(q), gk = at::zeros_like(k), gv = at::zeros_like(v);
    } else {
      std::tie(gq, gk, gv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
          grad, q, k, v, out, lse, dropout_p, is_causal, {}, scale);
    }
    stack.emplace_back(gq);
    stack.emplace_back(gk);
    stack.emplace_back(gv);
    stack.emplace_back(at::Tensor());  // no attn_bias
  };
  return st;
}

}  // namespace

void register_attention_rules() {
  at::native::_fused_sdp_choice_stub.set_privateuse1_dispatch_ptr(&sdp_choice);
  // Even on replicated inputs: the ops have no CPU kernel of their own; local_fn computes.
  const RuleOptions always{.even_when_replicated = true};
  register_rule("aten::_scaled_dot_product_fused_attention_overrideable", sdpa_forward, always);
  register_rule("aten::_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward,
                always);
}

}  // namespace vescale::dtensor
