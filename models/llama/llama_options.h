// LLaMA-3's options: plain values, no libtorch (the train config reads them as model.* through
// the registry, models/registry.h). Defaults are LLaMA-3 8B.
#pragma once
#include <cstdint>

namespace vescale::models {

struct RopeScaling {
  // Llama 3.1's "llama3" scaling of the rotary frequencies; off when factor <= 0.
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaOptions {
  int64_t vocab_size = 128256;
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 8;
  int64_t ffn_dim = 14336;  // hidden size of the SwiGLU feed-forward, given explicitly
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling = {};
  int64_t max_seq_len = 8192;
  bool tie_embeddings = false;
};

}  // namespace vescale::models
