// Qwen3's options, dense and MoE: LLaMA's trunk with Qwen's head width and attention variants,
// and for Qwen3-MoE the mixture of experts. Plain values, no libtorch (the train config reads
// them as model.* through the registry). Defaults are Qwen3-8B and Qwen3-30B-A3B.
#pragma once
#include <cstdint>

#include "vescale/models/llama/llama_options.h"
#include "vescale/models/shared/moe_options.h"

namespace vescale::models {

struct Qwen3Options {
  LlamaOptions llama{.vocab_size = 151936,
                     .dim = 4096,
                     .n_layers = 36,
                     .n_heads = 32,
                     .n_kv_heads = 8,
                     .ffn_dim = 12288,
                     .norm_eps = 1e-6,
                     .rope_theta = 1000000.0,
                     .max_seq_len = 40960};
  int64_t head_dim = 128;       // Qwen's heads need not tile dim (30B-A3B: 32 x 128 > 2048)
  bool attention_bias = false;  // biases on q, k, v and o (transformers' Qwen3; off in the releases)
};

struct Qwen3MoeOptions {
  // llama.ffn_dim is each expert's width (transformers' moe_intermediate_size).
  Qwen3Options qwen3{.llama = {.vocab_size = 151936,
                               .dim = 2048,
                               .n_layers = 48,
                               .n_heads = 32,
                               .n_kv_heads = 4,
                               .ffn_dim = 768,
                               .norm_eps = 1e-6,
                               .rope_theta = 1000000.0,
                               .max_seq_len = 40960}};
  MoEOptions moe{.n_experts = 128, .top_k = 8, .normalize_top_k = true, .aux_loss_coef = 0.001};
};

}  // namespace vescale::models
