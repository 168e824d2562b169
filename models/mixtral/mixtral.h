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
#include "vescale/nn/routed_experts.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include <vector>

namespace models {

MixtralOptions mixtral_8x7b();  // 46,702,792,704 parameters
int64_t mixtral_parameter_count(const MixtralOptions& o);

// E SwiGLU experts with stacked weights. forward(x [N, dim], expert_ids [N, k], gates [N, k])
// -> [N, dim]: each token's gate-weighted sum over its k experts, computed on one device by
// grouping the assignments by expert (kernels/expert_routing.h) and one grouped matmul per weight
// (kernels/grouped_mm.h). As nn::RoutedExperts a framework may run the same experts on a slice
// of them with its own token dispatch (expert parallelism, docs/moe.md).
struct ExpertsImpl : torch::nn::Module, vescale::nn::RoutedExperts {
  ExpertsImpl(int64_t n_experts, int64_t dim, int64_t hidden, double capacity_factor = 0);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& expert_ids,
                        const torch::Tensor& gates);
  int64_t num_experts() const override { return w1.size(0); }
  double capacity_factor() const override { return capacity; }
  std::vector<at::Tensor> expert_weights() const override { return {w1, w2, w3}; }
  std::vector<int64_t> hidden_dims() const override { return {1, 2, 1}; }
  // silu(x w1_e^T) * (x w3_e^T) w2_e^T on each expert's rows.
  at::Tensor run_experts(const at::Tensor& x, const std::vector<int64_t>& counts,
                         const std::vector<at::Tensor>& weights) const override;
  torch::Tensor w1, w2, w3;
  double capacity = 0;
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
  // The (token, choice) assignments each expert got, [E] fp32, summed over the training
  // forwards since the caller last reset it (not the reruns of activation checkpointing, not
  // evaluation). Undefined until the first one.
  torch::Tensor expert_load;
  // Aux-loss-free balancing (options.expert_bias_rate > 0): [E] fp32, added to the router's
  // probabilities for the choice of experts only. A buffer, saved in checkpoints.
  torch::Tensor expert_bias;
};
TORCH_MODULE(MoE);

struct MixtralBlockImpl : torch::nn::Module {
  explicit MixtralBlockImpl(const MixtralOptions& o);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        KVCache* cache = nullptr, int64_t layer = 0);
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  LlamaAttention attention{nullptr};
  MoE feed_forward{nullptr};
};
TORCH_MODULE(MixtralBlock);

struct MixtralImpl : torch::nn::Module {
  explicit MixtralImpl(const MixtralOptions& o);
  // tokens [B, T] (int64) -> logits [B, T, vocab_size]. With a cache (generation), the tokens
  // sit at positions [cache->length(), + T) and the cache advances by T.
  torch::Tensor forward(const torch::Tensor& tokens, KVCache* cache = nullptr);
  // The load-balancing loss of the last forward, Hugging Face's formula (Switch Transformer's,
  // pooled over all layers' tokens): E * sum_e f_e * P_e, with f_e the fraction of the
  // (token, choice) assignments that went to expert e and P_e the mean router probability of e,
  // both over every layer's tokens. 1 when perfectly balanced with k = 1, k for top-k.
  // Differentiable through P. A forward without autograd leaves the stored logits without a
  // graph: then this throws while grad mode is on. (Activation checkpointing must hand the
  // logits out of the checkpoint with a graph; vescale's does, as a side output.)
  torch::Tensor aux_loss() const;
  // The router z-loss of the last forward (ST-MoE): per layer the mean over tokens of
  // logsumexp(router logits)^2, summed over layers. Same checks as aux_loss.
  torch::Tensor z_loss() const;
  // The load-balancing and z-losses with their coefficients (options), the term the trainer adds.
  torch::Tensor routing_loss() const;
  // After an optimizer step, with each layer's expert loads of the step (global: summed over
  // every rank's tokens): bias_e += expert_bias_rate * sign(mean load - load_e). No-op when off.
  void update_expert_bias(const std::vector<torch::Tensor>& loads);
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
// The z-loss for given router logits: sum over layers of mean_tokens(logsumexp^2).
torch::Tensor router_z_loss(const std::vector<torch::Tensor>& router_logits);
// The routing losses in two halves, for a model cut into pipeline stages: the statistics of some
// layers ([2E + 2] fp32: top-k assignments per expert (no gradient), router probabilities summed
// per expert, rows, the layers' z-loss terms), which add up over layers, and the losses from the
// sum over all layers (load_balancing_from_stats: the load-balancing loss alone).
torch::Tensor routing_stats(const std::vector<torch::Tensor>& router_logits, int64_t n_experts,
                            int64_t top_k);
torch::Tensor load_balancing_from_stats(const torch::Tensor& stats, int64_t n_experts);
torch::Tensor routing_loss_from_stats(const torch::Tensor& stats, const MixtralOptions& o);

}  // namespace models
