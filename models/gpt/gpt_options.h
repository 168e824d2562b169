// GPT-2 / nanoGPT's options: plain values, no libtorch (the train config reads them as
// model.* through the registry, models/registry.h).
#pragma once
#include <cstdint>

namespace vescale::models {

struct GPTOptions {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears (GPT-2); nanoGPT's bias=False drops them
  double layer_norm_eps = 1e-5;
};

}  // namespace vescale::models
