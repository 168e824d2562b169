// The pipeline layers of a LLaMA-style trunk (LLaMA, and Mixtral, which shares its embedding,
// norms, rope and head): tok_embeddings, layers.{i} called with the rope tables cut to the
// sequence, and the head (norm, then output, or the tied embedding: the last stage then holds a
// copy of its weight). The same calls as the models' forward, one layer at a time.
#pragma once
#include <functional>
#include <vector>

#include "llama/llama.h"
#include "model.h"

namespace models {

struct LlamaTrunk {
  torch::nn::Embedding tok_embeddings{nullptr};
  size_t n_layers = 0;
  // Block i on x with cos, sin [T, head_dim].
  std::function<at::Tensor(size_t i, const at::Tensor& x, const at::Tensor& cos,
                           const at::Tensor& sin)>
      block;
  const at::Tensor* rope_cos = nullptr;  // the model's buffers (their storage may come later)
  const at::Tensor* rope_sin = nullptr;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null: tied to tok_embeddings
};

std::vector<PipelineLayer> llama_trunk_layers(LlamaTrunk trunk);

}  // namespace models
