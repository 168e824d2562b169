// Mixtral's options: LLaMA's (the trunk) and the mixture of experts, plain values, no libtorch
// (the train config reads them as model.* through the registry, models/registry.h). Defaults
// are Mixtral 8x7B.
#pragma once
#include "vescale/models/llama/llama_options.h"
#include "vescale/models/shared/moe_options.h"

namespace vescale::models {

struct MixtralOptions {
  // ffn_dim is each expert's SwiGLU width.
  LlamaOptions llama{.vocab_size = 32000, .rope_theta = 1000000.0, .max_seq_len = 32768};
  MoEOptions moe;
};

}  // namespace vescale::models
