#include "vescale/models/mixtral/mixtral.h"

namespace vescale::models {

MixtralOptions mixtral_8x7b() { return MixtralOptions{}; }

int64_t mixtral_parameter_count(const MixtralOptions& m) {
  const LlamaOptions& o = m.llama;
  const int64_t hd = o.dim / o.n_heads, E = m.moe.n_experts;
  const int64_t attention = o.dim * o.n_heads * hd * 2 + o.dim * o.n_kv_heads * hd * 2;
  const int64_t moe = E * 3 * o.dim * o.ffn_dim + E * o.dim;  // experts + router
  const int64_t layer = attention + moe + 2 * o.dim;
  return o.vocab_size * o.dim * (o.tie_embeddings ? 1 : 2) + o.n_layers * layer + o.dim;
}

MixtralImpl::MixtralImpl(const MixtralOptions& o)
    : MoETransformerImpl(o.llama, o.llama.ffn_dim, o.moe, "Mixtral"), options(o) {
  init_weights();
}

}  // namespace vescale::models
