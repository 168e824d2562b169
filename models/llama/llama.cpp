#include "vescale/models/llama/llama.h"

#include <memory>

namespace vescale::models {

LlamaOptions llama3_8b() {
  return LlamaOptions{.vocab_size = 128256,
                      .dim = 4096,
                      .n_layers = 32,
                      .n_heads = 32,
                      .n_kv_heads = 8,
                      .ffn_dim = 14336,
                      .norm_eps = 1e-5,
                      .rope_theta = 500000.0};
}

LlamaOptions llama3_70b() {
  return LlamaOptions{.vocab_size = 128256,
                      .dim = 8192,
                      .n_layers = 80,
                      .n_heads = 64,
                      .n_kv_heads = 8,
                      .ffn_dim = 28672,
                      .norm_eps = 1e-5,
                      .rope_theta = 500000.0};
}

int64_t llama_parameter_count(const LlamaOptions& o) {
  const int64_t hd = o.dim / o.n_heads;
  const int64_t attention =
      o.dim * o.n_heads * hd * 2 + o.dim * o.n_kv_heads * hd * 2;  // wq, wo, wk, wv
  const int64_t ffn = 3 * o.dim * o.ffn_dim;
  const int64_t layer = attention + ffn + 2 * o.dim;  // + two norms
  const int64_t embeddings = o.vocab_size * o.dim * (o.tie_embeddings ? 1 : 2);
  return embeddings + o.n_layers * layer + o.dim;  // + final norm
}

LlamaImpl::LlamaImpl(const LlamaOptions& o)
    : TransformerImpl(
          o, [&](int64_t) { return std::make_shared<FeedForwardImpl>(o.dim, o.ffn_dim); },
          "Llama"),
      options(o) {
  init_weights();
}

void LlamaImpl::init_weights() {
  init_trunk([this](size_t i, const InitStd& init) { init_swiglu(*layer(i).feed_forward, init); });
}

}  // namespace vescale::models
