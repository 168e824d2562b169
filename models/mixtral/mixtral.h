// Mixtral in plain libtorch: LLaMA's blocks (RMSNorm, GQA attention with RoPE) with the
// SwiGLU feed-forward replaced by a sparse mixture of experts. Each token goes to its top-k
// experts by router score (softmax over all experts, top-k, renormalized: the same as a softmax
// over the k chosen logits); dropless, every token reaches its k experts, no capacity limit.
//
// Parameter names and their Hugging Face MixtralForCausalLM names (as in saved checkpoints):
//   tok_embeddings.weight                    model.embed_tokens.weight
//   layers.{i}.attention_norm.weight         model.layers.{i}.input_layernorm.weight
//   layers.{i}.attention.w{q,k,v,o}.weight   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
//   layers.{i}.ffn_norm.weight               model.layers.{i}.post_attention_layernorm.weight
//   layers.{i}.feed_forward.router.weight    model.layers.{i}.block_sparse_moe.gate.weight      [E,
//   dim] layers.{i}.feed_forward.experts.w1
//   model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight, stacked over e  [E, ffn, dim]
//   layers.{i}.feed_forward.experts.w2       ... experts.{e}.w2.weight, stacked  [E, dim, ffn]
//   layers.{i}.feed_forward.experts.w3       ... experts.{e}.w3.weight, stacked  [E, ffn, dim]
//   norm.weight                              model.norm.weight
//   output.weight                            lm_head.weight
// The experts are stacked [E, out, in] parameters rather than E Linear modules: expert
// parallelism is then one placement (Shard(0) over the expert mesh dim) on three parameters,
// and HF import is a stack of the per-expert weights, unchanged in layout. (transformers 5
// fuses w1 and w3 into gate_up_proj in memory but saves the per-expert names above.)
#pragma once
#include "llama/llama.h"
#include "mixtral/mixtral_options.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <vector>

namespace models {

MixtralOptions mixtral_8x7b();  // 46,702,792,704 parameters
int64_t mixtral_parameter_count(const MixtralOptions& o);

// E SwiGLU experts with stacked weights. forward(x, counts): x [M, dim] holds the tokens sorted
// by expert, counts[e] rows for expert e, in order; returns [M, dim].
struct ExpertsImpl : torch::nn::Module {
  ExpertsImpl(int64_t n_experts, int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& counts);
  torch::Tensor w1, w2, w3;
};
TORCH_MODULE(Experts);

struct MoEImpl : torch::nn::Module {
  explicit MoEImpl(const MixtralOptions& o);
  // x [B, T, dim] -> [B, T, dim]. Keeps this call's router logits [B*T, E] in router_logits.
  torch::Tensor forward(const torch::Tensor& x);
  Linear router{nullptr};
  Experts experts{nullptr};
  int64_t n_experts, top_k;
  torch::Tensor router_logits;
};
TORCH_MODULE(MoE);

struct MixtralBlockImpl : torch::nn::Module {
  explicit MixtralBlockImpl(const MixtralOptions& o);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  LlamaAttention attention{nullptr};
  MoE feed_forward{nullptr};
};
TORCH_MODULE(MixtralBlock);

struct MixtralImpl : torch::nn::Module {
  explicit MixtralImpl(const MixtralOptions& o);
  // tokens [B, T] (int64) -> logits [B, T, vocab_size]
  torch::Tensor forward(const torch::Tensor& tokens);
  // The load-balancing loss of the last forward, Hugging Face's formula (Switch Transformer's,
  // pooled over all layers' tokens): E * sum_e f_e * P_e, with f_e the fraction of the
  // (token, choice) assignments that went to expert e and P_e the mean router probability of e,
  // both over every layer's tokens. 1 when perfectly balanced with k = 1, k for top-k.
  // Differentiable through P. A forward without autograd leaves the stored logits without a
  // graph: then this throws while grad mode is on. (Activation checkpointing must hand the
  // logits out of the checkpoint with a graph; vescale's does, as a side output.)
  torch::Tensor aux_loss() const;
  // Same init as Llama; experts like w1/w2/w3 there, the router N(0, 0.02).
  void init_weights();
  MixtralOptions options;
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when tie_embeddings
  torch::Tensor rope_cos, rope_sin;
};
TORCH_MODULE(Mixtral);

// The same loss for given router logits, one [N_l, E] tensor per layer.
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits,
                                  int64_t n_experts, int64_t top_k);
// The loss in two halves, for a model cut into pipeline stages: the statistics of some layers
// ([2E + 1] fp32: top-k assignments per expert (no gradient), router probabilities summed per
// expert, rows), which add up over layers, and the loss from the sum over all layers.
torch::Tensor load_balancing_stats(const std::vector<torch::Tensor>& router_logits,
                                   int64_t n_experts, int64_t top_k);
torch::Tensor load_balancing_from_stats(const torch::Tensor& stats, int64_t n_experts);

}  // namespace models
