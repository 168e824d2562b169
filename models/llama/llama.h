// LLaMA-3 in plain libtorch: RMSNorm pre-norm blocks, grouped-query attention with RoPE
// (theta and the "llama3" frequency scaling), SwiGLU feed-forward, optional tied embeddings.
// Knows nothing about parallelism; every submodule call goes through vescale::nn::call so a
// framework's forward hooks run.
//
// Parameter names (Meta / TorchTitan layout) and their Hugging Face LlamaForCausalLM names:
//   tok_embeddings.weight                 model.embed_tokens.weight
//   layers.{i}.attention_norm.weight      model.layers.{i}.input_layernorm.weight
//   layers.{i}.attention.wq.weight        model.layers.{i}.self_attn.q_proj.weight
//   layers.{i}.attention.wk.weight        model.layers.{i}.self_attn.k_proj.weight
//   layers.{i}.attention.wv.weight        model.layers.{i}.self_attn.v_proj.weight
//   layers.{i}.attention.wo.weight        model.layers.{i}.self_attn.o_proj.weight
//   layers.{i}.ffn_norm.weight            model.layers.{i}.post_attention_layernorm.weight
//   layers.{i}.feed_forward.w1.weight     model.layers.{i}.mlp.gate_proj.weight
//   layers.{i}.feed_forward.w2.weight     model.layers.{i}.mlp.down_proj.weight
//   layers.{i}.feed_forward.w3.weight     model.layers.{i}.mlp.up_proj.weight
//   norm.weight                           model.norm.weight
//   output.weight                         lm_head.weight (absent when tie_embeddings)
// Linear weights are [out, in]; no biases. Buffers (not parameters): rope_cos, rope_sin.
//
// RoPE uses the rotate-half convention (pairs (j, j + head_dim/2)), as Hugging Face does, so
// HF weights load unchanged. Meta's original checkpoints rotate interleaved pairs (2j, 2j+1):
// importing those needs the usual permutation of wq and wk rows (HF's convert_llama_weights
// does the same), see models/shared/hugging_face.h.
#pragma once
#include "shared/kv_cache.h"
#include "shared/linear.h"
#include "llama/llama_options.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

namespace models {

// The published LLaMA-3 shapes (8B: 8.03B parameters; 70B: 70.55B).
LlamaOptions llama3_8b();
LlamaOptions llama3_70b();
// Parameter count from the options alone (no tensors), for dry runs and as a test oracle.
int64_t llama_parameter_count(const LlamaOptions& o);

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
std::pair<torch::Tensor, torch::Tensor> rope_tables(const LlamaOptions& o,
                                                    const torch::TensorOptions& device);
// The per-pair inverse frequencies [head_dim / 2] (fp32), with the llama3 scaling applied.
torch::Tensor rope_inv_freq(const LlamaOptions& o, const torch::TensorOptions& device);
// x [B, H, T, head_dim] rotated by position: x * cos + rotate_half(x) * sin, cos/sin [T, head_dim].
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin);

struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const LlamaOptions& o);
  // x [B, T, dim], cos/sin [T, head_dim] -> [B, T, dim]; causal. With a cache, x holds the
  // positions after the cached ones, whose keys and values join layer `layer` of the cache.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        KVCache* cache = nullptr, int64_t layer = 0);
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  int64_t n_heads, n_kv_heads, head_dim;
};
TORCH_MODULE(LlamaAttention);

// TorchTitan's init scales (llama.cpp), shared with Mixtral's trunk.
struct LlamaInitStd {
  double in, resid, head, embedding;
};
LlamaInitStd llama_init_std(const LlamaOptions& o);
// wq/wk/wv at `in`, wo at `resid` (in place).
void init_attention(LlamaAttentionImpl& a, const LlamaInitStd& init);
// Recomputes the rope tables into the existing buffers; nothing to compute on the meta device.
void fill_rope(const LlamaOptions& o, torch::Tensor& cos, torch::Tensor& sin);

struct FeedForwardImpl : torch::nn::Module {
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);  // w2(silu(w1 x) * w3 x)
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

struct LlamaBlockImpl : torch::nn::Module {
  explicit LlamaBlockImpl(const LlamaOptions& o);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        KVCache* cache = nullptr, int64_t layer = 0);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  LlamaAttention attention{nullptr};
  FeedForward feed_forward{nullptr};
};
TORCH_MODULE(LlamaBlock);

struct LlamaImpl : torch::nn::Module {
  explicit LlamaImpl(const LlamaOptions& o);
  // tokens [B, T] (int64, T <= max_seq_len) -> logits [B, T, vocab_size]. With a cache (generation),
  // the tokens sit at positions [cache->length(), + T) and the cache advances by T.
  torch::Tensor forward(const torch::Tensor& tokens, KVCache* cache = nullptr);
  // TorchTitan-style init, run by the constructor; see llama.cpp. Only in-place random fills of
  // the existing parameters (no new tensors, no reads), so a framework can re-run it after
  // sharding them. Also recomputes the rope tables (deterministic) into the existing buffers.
  void init_weights();
  LlamaOptions options;
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when tie_embeddings
  torch::Tensor rope_cos, rope_sin;
};
TORCH_MODULE(Llama);

}  // namespace models
