// GPT-2 / nanoGPT in plain libtorch: learned positions, pre-LayerNorm blocks, GELU MLP, tied
// token embedding and LM head, dropout. Knows nothing about parallelism.
//
// Parameter names follow Hugging Face's GPT2LMHeadModel without the "transformer." prefix:
//   wte.weight, wpe.weight, h.{i}.ln_1.{weight,bias}, h.{i}.attn.c_attn.{weight,bias},
//   h.{i}.attn.c_proj.{weight,bias}, h.{i}.ln_2.*, h.{i}.mlp.c_fc.*, h.{i}.mlp.c_proj.*, ln_f.*
// Linear weights are [out, in] (models::Linear); HF's Conv1D stores [in, out], so import
// transposes them. The LM head is wte (tied), so it has no parameter of its own.
#pragma once
#include "vescale/models/model.h"
#include "vescale/models/shared/kv_cache.h"
#include "vescale/models/shared/layer_norm.h"
#include "vescale/models/shared/linear.h"
#include "vescale/models/gpt/gpt_options.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

namespace vescale::models {

struct GPTAttentionImpl : torch::nn::Module {
  explicit GPTAttentionImpl(const GPTOptions& o);
  // x [B, T, C] -> [B, T, C], causal. With a cache, x holds the positions after the cached
  // ones, whose keys and values join layer `layer` of the cache.
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, int64_t layer = 0);
  Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};
  int64_t n_head;
  double dropout;
};
TORCH_MODULE(GPTAttention);

struct GPTMLPImpl : torch::nn::Module {
  explicit GPTMLPImpl(const GPTOptions& o);
  torch::Tensor forward(const torch::Tensor& x);
  Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(GPTMLP);

struct GPTBlockImpl : torch::nn::Module {
  explicit GPTBlockImpl(const GPTOptions& o);
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, int64_t layer = 0);
  LayerNorm ln_1{nullptr}, ln_2{nullptr};
  GPTAttention attn{nullptr};
  GPTMLP mlp{nullptr};
};
TORCH_MODULE(GPTBlock);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const GPTOptions& o);
  // tokens [B, T] (int64) -> logits [B, T, vocab]. With a cache (generation), the tokens sit at
  // positions [cache->length(), + T) and the cache advances by T.
  torch::Tensor forward(const torch::Tensor& tokens, KVCache* cache = nullptr);
  // The three pieces forward runs, and the same three one layer at a time (Model::layers).
  torch::Tensor embed(const torch::Tensor& tokens, int64_t offset = 0);
  torch::Tensor block(size_t i, const torch::Tensor& x, KVCache* cache = nullptr);
  torch::Tensor head(const torch::Tensor& x);
  std::vector<Layer> layer_chain();
  // GPT-2's initialization (run by the constructor; through torch::nn::init).
  void init_weights();
  GPTOptions options;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h;
  LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT);

}  // namespace vescale::models
