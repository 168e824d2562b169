// The sparse mixture of experts a transformer block can hold instead of the dense SwiGLU
// (Mixtral, Qwen3-MoE): a router, E SwiGLU experts with stacked weights, each token sent to its
// top-k experts by router probability (softmax over all experts, top-k, renormalized unless the
// family says not); dropless unless a capacity factor is set. And the model over such blocks:
// its routing losses (load balancing, z-loss), expert loads and aux-loss-free bias, and what
// the trainer needs of them (Model::aux_loss, aux_over_layers, moe).
//
// The experts are stacked [E, out, in] parameters rather than E Linear modules: expert
// parallelism is then one placement (Shard(0) over the expert mesh dim) on three parameters,
// and Hugging Face import is a stack of the per-expert weights, unchanged in layout.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "vescale/models/llama/transformer.h"
#include "vescale/models/model.h"
#include "vescale/models/shared/moe_options.h"
#include "vescale/nn/routed_experts.h"

namespace vescale::models {

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

struct MoEImpl : FeedForwardLayer {
  // Experts of `hidden` width over the residual width `dim`.
  MoEImpl(int64_t dim, int64_t hidden, const MoEOptions& o);
  // x [B, T, dim] -> [B, T, dim]. Keeps this call's router logits [B*T, E] in router_logits.
  torch::Tensor forward(const torch::Tensor& x) override;
  Linear router{nullptr};
  Experts experts{nullptr};
  int64_t n_experts, top_k;
  bool normalize_top_k;
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

// The MoE of a block of a MoE transformer (throws when the block holds another feed-forward).
MoEImpl& moe_of(torch::nn::Module& block);

// A transformer whose every block holds a MoE.
struct MoETransformerImpl : TransformerImpl {
  MoETransformerImpl(const TrunkOptions& trunk, int64_t expert_hidden, const MoEOptions& moe,
                     std::string family);
  // The trunk's init, then each layer's router N(0, 0.02) and experts like LLaMA's w1 (in) and
  // w2, w3 (resid).
  void init_weights();
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
  MoEOptions moe;
};

// What the trainer drives of a MoE transformer beyond the trunk: its routing loss (also cut
// into pipeline stages), the block's side outputs for activation checkpointing, the expert
// loads and bias. `m.module` is `model`.
void describe_moe(Model& m, MoETransformerImpl* model);

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
torch::Tensor routing_loss_from_stats(const torch::Tensor& stats, const MoEOptions& o);

}  // namespace vescale::models
