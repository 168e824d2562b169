#include "vescale/models/qwen3/qwen3.h"

#include <memory>

namespace vescale::models {

Qwen3Options qwen3_8b() { return Qwen3Options{}; }
Qwen3MoeOptions qwen3_30b_a3b() { return Qwen3MoeOptions{}; }

namespace {
// Attention (q, k, v, o, with biases on all four under attention_bias, the two head norms) and the block's two norms.
int64_t attention_and_norms(const Qwen3Options& q) {
  const LlamaOptions& o = q.llama;
  const int64_t hd = q.head_dim, qd = o.n_heads * hd, kvd = o.n_kv_heads * hd;
  const int64_t bias = q.attention_bias ? qd + 2 * kvd + o.dim : 0;
  return o.dim * qd * 2 + o.dim * kvd * 2 + bias + 2 * hd + 2 * o.dim;
}
int64_t embeddings_and_head(const LlamaOptions& o) {
  return o.vocab_size * o.dim * (o.tie_embeddings ? 1 : 2) + o.dim;  // + final norm
}
}  // namespace

int64_t qwen3_parameter_count(const Qwen3Options& q) {
  const LlamaOptions& o = q.llama;
  return embeddings_and_head(o) + o.n_layers * (attention_and_norms(q) + 3 * o.dim * o.ffn_dim);
}

int64_t qwen3_moe_parameter_count(const Qwen3MoeOptions& m) {
  const LlamaOptions& o = m.qwen3.llama;
  const int64_t E = m.moe.n_experts;
  const int64_t moe = E * 3 * o.dim * o.ffn_dim + E * o.dim;  // experts + router
  return embeddings_and_head(o) + o.n_layers * (attention_and_norms(m.qwen3) + moe);
}

TrunkOptions qwen3_trunk(const Qwen3Options& o) {
  return TrunkOptions(o.llama, o.head_dim, /*qk_norm=*/true, /*qkv_bias=*/o.attention_bias,
                      /*o_bias=*/o.attention_bias);
}

Qwen3Impl::Qwen3Impl(const Qwen3Options& o)
    : TransformerImpl(
          qwen3_trunk(o),
          [&](int64_t) { return std::make_shared<FeedForwardImpl>(o.llama.dim, o.llama.ffn_dim); },
          "Qwen3"),
      options(o) {
  init_weights();
}

void Qwen3Impl::init_weights() {
  init_trunk([this](size_t i, const InitStd& init) { init_swiglu(*layer(i).feed_forward, init); });
}

Qwen3MoeImpl::Qwen3MoeImpl(const Qwen3MoeOptions& o)
    : MoETransformerImpl(qwen3_trunk(o.qwen3), o.qwen3.llama.ffn_dim, o.moe, "Qwen3-MoE"),
      options(o) {
  init_weights();
}

}  // namespace vescale::models
