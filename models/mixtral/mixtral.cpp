#include "mixtral/mixtral.h"

#include "vescale/kernels/expert_routing.h"
#include "vescale/kernels/grouped_mm.h"
#include "vescale/nn/module_hooks.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

namespace models {

using vescale::nn::call;
namespace kernels = vescale::kernels;

LlamaOptions MixtralOptions::llama() const {
  return LlamaOptions{.vocab_size = vocab_size,
                      .dim = dim,
                      .n_layers = n_layers,
                      .n_heads = n_heads,
                      .n_kv_heads = n_kv_heads,
                      .ffn_dim = ffn_dim,
                      .norm_eps = norm_eps,
                      .rope_theta = rope_theta,
                      .rope_scaling = rope_scaling,
                      .max_seq_len = max_seq_len,
                      .tie_embeddings = tie_embeddings};
}

MixtralOptions mixtral_8x7b() { return MixtralOptions{}; }

int64_t mixtral_parameter_count(const MixtralOptions& o) {
  const int64_t hd = o.dim / o.n_heads;
  const int64_t attention = o.dim * o.n_heads * hd * 2 + o.dim * o.n_kv_heads * hd * 2;
  const int64_t moe =
      o.n_experts * 3 * o.dim * o.ffn_dim + o.n_experts * o.dim;  // experts + router
  const int64_t layer = attention + moe + 2 * o.dim;
  return o.vocab_size * o.dim * (o.tie_embeddings ? 1 : 2) + o.n_layers * layer + o.dim;
}

ExpertsImpl::ExpertsImpl(int64_t n_experts, int64_t dim, int64_t hidden, double capacity_factor)
    : capacity(capacity_factor) {
  w1 = register_parameter("w1", torch::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({n_experts, hidden, dim}));
  // Usable on its own (Mixtral::init_weights refills these with depth-scaled stds).
  torch::NoGradGuard no_grad;
  for (auto* w : {&w1, &w2, &w3}) torch::nn::init::normal_(*w, 0.0, 0.02);
}

at::Tensor ExpertsImpl::run_experts(const at::Tensor& x, const std::vector<int64_t>& counts,
                                    const std::vector<at::Tensor>& weights) const {
  TORCH_CHECK(weights.size() == 3, "Experts: run_experts takes w1, w2, w3");
  auto h = at::silu(kernels::grouped_mm(x, weights[0], counts)) *
           kernels::grouped_mm(x, weights[2], counts);
  return kernels::grouped_mm(h, weights[1], counts);
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& expert_ids,
                                   const torch::Tensor& gates) {
  const int64_t E = num_experts(), k = expert_ids.size(1);
  auto groups = kernels::group_by_expert(expert_ids, E);
  if (capacity > 0)
    groups = kernels::within_capacity(groups, kernels::expert_capacity(capacity, x.size(0), k, E));
  auto token = groups.order.div(k, "floor");
  auto y = run_experts(x.index_select(0, token), groups.counts, {w1, w2, w3});
  return kernels::combine_by_token(y, groups.order, gates);
}

MoEImpl::MoEImpl(const MixtralOptions& o) : n_experts(o.n_experts), top_k(o.top_k) {
  TORCH_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, "Mixtral: top_k (", o.top_k,
              ") must be in [1, n_experts = ", o.n_experts, "]");
  router =
      register_module("router", Linear(torch::nn::LinearOptions(o.dim, o.n_experts).bias(false)));
  experts = register_module("experts", Experts(o.n_experts, o.dim, o.ffn_dim, o.capacity_factor));
  if (o.expert_bias_rate > 0)
    expert_bias = register_buffer("expert_bias", torch::zeros({o.n_experts}));
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  auto flat = x.reshape({-1, x.size(-1)});  // [N, dim]
  router_logits = call(router, flat);       // [N, E]
  // Softmax over all experts (fp32), keep the top k, renormalize them to sum to 1. The expert
  // bias (when on) moves the choice only; the gates stay the router's probabilities.
  auto probs = at::softmax(router_logits, -1, at::kFloat);
  torch::Tensor top_p, top_e;
  if (expert_bias.defined()) {
    top_e = std::get<1>((probs + expert_bias).topk(top_k, -1));
    top_p = probs.gather(-1, top_e);
  } else {
    std::tie(top_p, top_e) = probs.topk(top_k, -1);
  }
  auto gates = (top_p / top_p.sum(-1, /*keepdim=*/true)).to(x.scalar_type());
  if (is_training() && !vescale::nn::recomputing()) {
    torch::NoGradGuard no_grad;
    auto load = at::one_hot(top_e.reshape({-1}), n_experts).sum(0).to(at::kFloat);
    expert_load = expert_load.defined() ? expert_load + load : load;
  }
  return call(experts, flat, top_e, gates).view(x.sizes());
}

MixtralBlockImpl::MixtralBlockImpl(const MixtralOptions& o) {
  attention_norm = register_module("attention_norm", RMSNorm(o.dim, o.norm_eps));
  attention = register_module("attention", LlamaAttention(o.llama()));
  ffn_norm = register_module("ffn_norm", RMSNorm(o.dim, o.norm_eps));
  feed_forward = register_module("feed_forward", MoE(o));
}

torch::Tensor MixtralBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, KVCache* cache, int64_t layer) {
  auto h = x + call(attention, call(attention_norm, x), cos, sin, cache, layer);
  return h + call(feed_forward, call(ffn_norm, h));
}

MixtralImpl::MixtralImpl(const MixtralOptions& o) : options(o) {
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(o.vocab_size, o.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layers; ++i) layers->push_back(MixtralBlock(o));
  norm = register_module("norm", RMSNorm(o.dim, o.norm_eps));
  if (!o.tie_embeddings) {
    output = register_module("output",
                             Linear(torch::nn::LinearOptions(o.dim, o.vocab_size).bias(false)));
  }
  rope_cos = register_buffer("rope_cos", torch::empty({o.max_seq_len, o.dim / o.n_heads}));
  rope_sin = register_buffer("rope_sin", torch::empty({o.max_seq_len, o.dim / o.n_heads}));
  init_weights();
}

void MixtralImpl::init_weights() {
  torch::NoGradGuard no_grad;
  const auto init = llama_init_std(options.llama());
  torch::nn::init::normal_(tok_embeddings->weight, 0.0, init.embedding);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers->ptr<MixtralBlockImpl>(i).get();
    init_attention(*layer->attention, init);
    auto& moe = *layer->feed_forward;
    torch::nn::init::normal_(moe.router->weight, 0.0, init.in);
    torch::nn::init::normal_(moe.experts->w1, 0.0, init.in);
    torch::nn::init::normal_(moe.experts->w2, 0.0, init.resid);
    torch::nn::init::normal_(moe.experts->w3, 0.0, init.resid);
    torch::nn::init::ones_(layer->attention_norm->weight);
    torch::nn::init::ones_(layer->ffn_norm->weight);
  }
  torch::nn::init::ones_(norm->weight);
  if (output) torch::nn::init::normal_(output->weight, 0.0, init.head);
  fill_rope(options.llama(), rope_cos, rope_sin);
}

torch::Tensor MixtralImpl::forward(const torch::Tensor& tokens, KVCache* cache) {
  const int64_t T = tokens.size(1), offset = cache ? cache->length() : 0;
  TORCH_CHECK(offset + T <= options.max_seq_len, "Mixtral: sequence length ", offset + T,
              " exceeds max_seq_len ", options.max_seq_len);
  auto cos = rope_cos.narrow(0, offset, T), sin = rope_sin.narrow(0, offset, T);
  auto x = call(tok_embeddings, tokens);
  for (size_t i = 0; i < layers->size(); ++i)
    x = call(layers->ptr<MixtralBlockImpl>(i), x, cos, sin, cache, static_cast<int64_t>(i));
  if (cache) cache->advance(T);
  x = call(norm, x);
  return output ? call(output, x) : at::linear(x, tok_embeddings->weight);
}

namespace {
// logsumexp over the last dim from ops every tensor kind has.
torch::Tensor logsumexp_rows(const torch::Tensor& logits) {
  auto l = logits.to(at::kFloat);
  auto m = std::get<0>(l.max(-1, /*keepdim=*/true)).detach();
  return (l - m).exp().sum(-1).log() + m.squeeze(-1);
}
}  // namespace

torch::Tensor routing_stats(const std::vector<torch::Tensor>& router_logits, int64_t n_experts,
                            int64_t top_k) {
  TORCH_CHECK(!router_logits.empty(), "load_balancing_loss: no router logits (run forward first)");
  torch::Tensor assignments, prob_sum, z;
  int64_t rows = 0;
  for (const auto& logits : router_logits) {
    auto probs = at::softmax(logits, -1, at::kFloat);
    auto chosen = std::get<1>(probs.topk(top_k, -1));
    auto counts =
        at::one_hot(chosen.reshape({-1}), n_experts).sum(0).to(at::kFloat);  // no gradient
    auto psum = probs.sum(0);
    auto zl = logsumexp_rows(logits).pow(2).mean().reshape({1});
    assignments = assignments.defined() ? assignments + counts : counts;
    prob_sum = prob_sum.defined() ? prob_sum + psum : psum;
    z = z.defined() ? z + zl : zl;
    rows += logits.size(0);
  }
  return at::cat(
      {assignments, prob_sum, at::full({1}, static_cast<double>(rows), prob_sum.options()), z});
}

torch::Tensor load_balancing_from_stats(const torch::Tensor& stats, int64_t n_experts) {
  const auto rows = stats.narrow(0, 2 * n_experts, 1);
  return n_experts *
         ((stats.narrow(0, 0, n_experts) / rows) * (stats.narrow(0, n_experts, n_experts) / rows))
             .sum();
}

torch::Tensor routing_loss_from_stats(const torch::Tensor& stats, const MixtralOptions& o) {
  auto loss = load_balancing_from_stats(stats, o.n_experts) * o.aux_loss_coef;
  if (o.router_z_loss_coef > 0)
    loss = loss + stats.narrow(0, 2 * o.n_experts + 1, 1).sum() * o.router_z_loss_coef;
  return loss;
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits,
                                  int64_t n_experts, int64_t top_k) {
  return load_balancing_from_stats(routing_stats(router_logits, n_experts, top_k), n_experts);
}

torch::Tensor router_z_loss(const std::vector<torch::Tensor>& router_logits) {
  torch::Tensor z;
  for (const auto& logits : router_logits) {
    auto zl = logsumexp_rows(logits).pow(2).mean();
    z = z.defined() ? z + zl : zl;
  }
  return z;
}

namespace {
std::vector<torch::Tensor> checked_router_logits(const torch::nn::ModuleList& layers,
                                                 const char* who) {
  std::vector<torch::Tensor> logits;
  for (size_t i = 0; i < layers->size(); ++i) {
    const auto& moe = layers->ptr<MixtralBlockImpl>(i)->feed_forward;
    const auto& l = moe->router_logits;
    TORCH_CHECK(l.defined(), "Mixtral::", who, ": no router logits yet; call forward first");
    TORCH_CHECK(!(at::GradMode::is_enabled() && l.is_leaf() && !l.requires_grad() &&
                  moe->router->weight.requires_grad()),
                "Mixtral::", who, ": layer ", i,
                "'s router logits were computed without autograd (no_grad or ",
                "activation checkpointing), so the loss would have no gradient; run forward with "
                "autograd");
    logits.push_back(l);
  }
  return logits;
}
}  // namespace

torch::Tensor MixtralImpl::aux_loss() const {
  return load_balancing_loss(checked_router_logits(layers, "aux_loss"), options.n_experts,
                             options.top_k);
}

torch::Tensor MixtralImpl::z_loss() const {
  return router_z_loss(checked_router_logits(layers, "z_loss"));
}

torch::Tensor MixtralImpl::routing_loss() const {
  return routing_loss_from_stats(routing_stats(checked_router_logits(layers, "routing_loss"),
                                               options.n_experts, options.top_k),
                                 options);
}

void MixtralImpl::update_expert_bias(const std::vector<torch::Tensor>& loads) {
  if (options.expert_bias_rate <= 0) return;
  TORCH_CHECK(loads.size() == layers->size(), "Mixtral::update_expert_bias: ", loads.size(),
              " loads for ", layers->size(), " layers");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!loads[i].defined()) continue;  // a layer of another pipeline stage
    auto& bias = layers->ptr<MixtralBlockImpl>(i)->feed_forward->expert_bias;
    auto load = loads[i].to(bias.device(), at::kFloat);
    bias.add_((load.mean() - load).sign() * options.expert_bias_rate);
  }
}

}  // namespace models
