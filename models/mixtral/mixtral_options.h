// Mixtral's options: plain values, no libtorch (the train config reads them as model.* through
// the registry, models/registry.h). Defaults are Mixtral 8x7B.
#pragma once
#include <cstdint>

#include "llama/llama_options.h"

namespace models {

struct MixtralOptions {
  int64_t vocab_size = 32000;
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 8;
  int64_t ffn_dim = 14336;  // hidden size of each expert's SwiGLU
  int64_t n_experts = 8;
  int64_t top_k = 2;
  double norm_eps = 1e-5;
  double rope_theta = 1000000.0;
  RopeScaling rope_scaling = {};
  int64_t max_seq_len = 32768;
  bool tie_embeddings = false;
  double aux_loss_coef = 0.02;  // weight of the load-balancing loss the trainer adds
  double router_z_loss_coef = 0;  // weight of the router z-loss (ST-MoE), summed over layers
  // 0: dropless. Otherwise each expert takes at most ceil(capacity_factor * tokens * top_k /
  // n_experts) of a forward's assignments, in token order; the rest are dropped (docs/moe.md).
  double capacity_factor = 0;
  // Aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the router's scores for
  // the choice of experts only (not the gates), moved by this much per optimizer step towards
  // balance: bias_e += rate * sign(mean load - load_e). 0: off.
  double expert_bias_rate = 0;
  // The attention and norm part, as LLaMA options.
  LlamaOptions llama() const;
};

}  // namespace models
