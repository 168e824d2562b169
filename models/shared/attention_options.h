// Internal to models/: the model.* fields LLaMA and Mixtral share (attention, norms, RoPE,
// embeddings), read and checked alike.
#pragma once
#include <string>

#include "vescale/models/shared/options_impl.h"

namespace vescale::models {

template <class V, class C>
void visit_attention(V& v, C& c) {
  v.field("vocab_size", c.vocab_size);
  v.field("dim", c.dim);
  v.field("n_layers", c.n_layers);
  v.field("n_heads", c.n_heads);
  v.field("n_kv_heads", c.n_kv_heads);
  v.field("ffn_dim", c.ffn_dim);
  v.field("norm_eps", c.norm_eps);
  v.field("rope_theta", c.rope_theta);
  v.field("max_seq_len", c.max_seq_len);
  v.field("tie_embeddings", c.tie_embeddings);
}

// `head_from_dim`: the head width is dim / n_heads (LLaMA, Mixtral), so they must divide into an
// even width; a family with its own head_dim checks that instead.
template <class C>
void validate_attention(const ModelOptions::Fail& fail, const C& c, bool head_from_dim = true) {
  check_positive(fail, "vocab_size", c.vocab_size);
  check_positive(fail, "dim", c.dim);
  check_positive(fail, "n_layers", c.n_layers);
  check_positive(fail, "n_heads", c.n_heads);
  check_positive(fail, "n_kv_heads", c.n_kv_heads);
  check_positive(fail, "ffn_dim", c.ffn_dim);
  check_positive(fail, "max_seq_len", c.max_seq_len);
  if (head_from_dim && !(c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0))
    fail("dim", std::to_string(c.dim) + " must be divisible by n_heads (" +
                    std::to_string(c.n_heads) + ") into an even head dim (RoPE)");
  if (c.n_heads % c.n_kv_heads != 0)
    fail("n_kv_heads", "n_heads (" + std::to_string(c.n_heads) +
                           ") must be a multiple of n_kv_heads (" + std::to_string(c.n_kv_heads) +
                           ")");
}

}  // namespace vescale::models
