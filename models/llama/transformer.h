// The LLaMA transformer trunk, which Mixtral and Qwen3 build on: token embedding, pre-norm
// blocks of grouped-query attention with RoPE and a feed-forward, the final RMSNorm and the head
// (or the tied embedding). A family gives its options and a block's feed-forward (LLaMA's dense
// SwiGLU, a mixture of experts); the trunk's forward is the one forward, and its pipeline layers
// run the same three pieces (embed, block, head) one layer at a time.
//
// Parameter names (Meta / TorchTitan layout): tok_embeddings.weight,
// layers.{i}.attention_norm.weight, layers.{i}.attention.w{q,k,v,o}.weight (w{q,k,v}.bias with
// qkv_bias, wo.bias with o_bias; attention.{q,k}_norm.weight with qk_norm), layers.{i}.ffn_norm.weight,
// layers.{i}.feed_forward.* (the family's), norm.weight, output.weight (absent when tied).
// Buffers (not parameters): rope_cos, rope_sin. Every submodule call goes through
// vescale::nn::call so a framework's forward hooks run.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "vescale/models/llama/llama_options.h"
#include "vescale/models/model.h"
#include "vescale/models/shared/kv_cache.h"
#include "vescale/models/shared/linear.h"
#include "vescale/models/shared/moe_options.h"

namespace vescale::models {

// LLaMA's options and what the descendants change in the attention.
struct TrunkOptions {
  TrunkOptions(const LlamaOptions& o) : llama(o) {}  // NOLINT: a LLaMA is a plain trunk
  TrunkOptions(const LlamaOptions& o, int64_t head_dim, bool qk_norm, bool qkv_bias, bool o_bias)
      : llama(o), head_dim(head_dim), qk_norm(qk_norm), qkv_bias(qkv_bias), o_bias(o_bias) {}
  LlamaOptions llama;
  int64_t head_dim = 0;   // 0: dim / n_heads (Qwen3 sets it: its heads need not tile dim)
  bool qk_norm = false;   // an RMSNorm over each head of q and k before RoPE (Qwen3)
  bool qkv_bias = false;  // biases on wq, wk, wv (Qwen2; Qwen3's attention_bias)
  bool o_bias = false;    // a bias on wo (Qwen3's attention_bias; not Qwen2)
  int64_t head_width() const { return head_dim > 0 ? head_dim : llama.dim / llama.n_heads; }
};

// Root-mean-square norm: weight * x / sqrt(mean(x^2) + eps). The normalization runs in fp32 and
// is cast back to x's dtype before the weight (also cast to x's dtype) multiplies, as HF's
// LlamaRMSNorm does; the output keeps x's dtype even with fp32 master weights.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// Rotary embedding tables [max_seq_len, head_dim] in fp32: cos and sin of position * inv_freq,
// each frequency repeated for both halves of the head dim.
std::pair<torch::Tensor, torch::Tensor> rope_tables(const TrunkOptions& o,
                                                    const torch::TensorOptions& device);
// The per-pair inverse frequencies [head_dim / 2] (fp32), with the llama3 scaling applied.
torch::Tensor rope_inv_freq(const TrunkOptions& o, const torch::TensorOptions& device);
// x [B, H, T, head_dim] rotated by position: x * cos + rotate_half(x) * sin, cos/sin [T, head_dim].
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin);

// The attention over the sequence, q [B, H, T, D] against k, v [B, Hkv, T, D] (grouped-query
// heads repeated here), causal: a module of its own so that a framework can put a boundary in
// its place (context parallelism runs it over a split sequence). No parameters.
struct CausalAttentionImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
};
TORCH_MODULE(CausalAttention);

struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const TrunkOptions& o);
  // x [B, T, dim], cos/sin [T, head_dim] -> [B, T, dim]; causal. With a cache, x holds the
  // positions after the cached ones, whose keys and values join layer `layer` of the cache.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        KVCache* cache = nullptr, int64_t layer = 0);
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // null without qk_norm
  CausalAttention core{nullptr};
  int64_t n_heads, n_kv_heads, head_dim;
};
TORCH_MODULE(Attention);

// A block's feed-forward, [B, T, dim] -> [B, T, dim]: dense, or a mixture of experts.
struct FeedForwardLayer : torch::nn::Module {
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

// LLaMA's SwiGLU: w2(silu(w1 x) * w3 x).
struct FeedForwardImpl : FeedForwardLayer {
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x) override;
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

struct TransformerBlockImpl : torch::nn::Module {
  // The feed-forward is made after the attention (the construction order of libtorch's
  // default inits, which draw from its generator).
  TransformerBlockImpl(const TrunkOptions& o,
                       const std::function<std::shared_ptr<FeedForwardLayer>()>& make_feed_forward);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        KVCache* cache = nullptr, int64_t layer = 0);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  std::shared_ptr<FeedForwardLayer> feed_forward;
};
TORCH_MODULE(TransformerBlock);

// TorchTitan's init scales (transformer.cpp).
struct InitStd {
  double in, resid, head, embedding;
};
InitStd llama_init_std(const LlamaOptions& o);
// LLaMA's SwiGLU init: w1 N(0, in), w2 and w3 N(0, resid). `ff` must be a FeedForwardImpl.
void init_swiglu(FeedForwardLayer& ff, const InitStd& init);

struct TransformerImpl : torch::nn::Module {
  // Layer i's feed-forward from `feed_forward(i)`. Parameters are allocated, not initialised:
  // the family's init_weights does that (init_trunk, and its feed-forwards).
  // `family` names the model in errors ("Llama").
  TransformerImpl(const TrunkOptions& o,
                  const std::function<std::shared_ptr<FeedForwardLayer>(int64_t)>& feed_forward,
                  std::string family);

  // tokens [B, T] (int64, T <= max_seq_len) -> logits [B, T, vocab_size]. With a cache
  // (generation), the tokens sit at positions [cache->length(), + T) and the cache advances.
  torch::Tensor forward(const torch::Tensor& tokens, KVCache* cache = nullptr);
  // tokens [B, T] at global positions [T] (int64, increasing): RoPE by them; attention among
  // these tokens (or, with a context-parallel boundary on the attention cores, the whole
  // sequence). forward(tokens) is forward_at(tokens, 0..T-1).
  torch::Tensor forward_at(const torch::Tensor& tokens, const torch::Tensor& positions);
  // The three pieces forward runs, for the pipeline layers.
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor block(size_t i, const torch::Tensor& x, const torch::Tensor& cos,
                      const torch::Tensor& sin, KVCache* cache = nullptr);
  torch::Tensor head(const torch::Tensor& x);
  // forward as a chain of layers (Model::layers): tok_embeddings, layers.{i}, output.
  std::vector<Layer> layer_chain();
  TransformerBlockImpl& layer(size_t i) { return *layers->ptr<TransformerBlockImpl>(i); }

  // TorchTitan's init of everything but the feed-forwards, in one pass over the layers so the
  // draws keep their order: embedding N(0, 1) (0.02 when tied); per layer wq/wk/wv N(0, 0.02),
  // wo N(0, 0.02 / sqrt(2 * n_layers)), then `init_feed_forward(i, stds)`, then the norms 1;
  // the final norm 1, the head N(0, dim^-1/2); the rope tables. Only in-place fills of the
  // existing parameters, so a framework can rerun it after sharding them.
  void init_trunk(const std::function<void(size_t, const InitStd&)>& init_feed_forward);

  TrunkOptions trunk;
  std::string family;
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when tie_embeddings
  torch::Tensor rope_cos, rope_sin;
};

// What a trunk block keeps for backward per token (model.h): its dense SwiGLU feed-forward's,
// or with `moe` its routed experts'.
BlockActivations trunk_block_activations(const TrunkOptions& o, const MoEOptions* moe = nullptr);

// What the trainer drives of a trunk model (model.h): its forward, cached forward, `init`
// (the family's init_weights), the blocks ("layers.*") and the pipeline layers.
Model trunk_model(std::shared_ptr<TransformerImpl> model, std::function<void()> init);

}  // namespace vescale::models
