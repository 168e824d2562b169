#include "mixtral/mixtral.h"

#include "vescale/nn/module_hooks.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>

namespace models {

using vescale::nn::call;

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

ExpertsImpl::ExpertsImpl(int64_t n_experts, int64_t dim, int64_t hidden) {
  w1 = register_parameter("w1", torch::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({n_experts, hidden, dim}));
  // Usable on its own (Mixtral::init_weights refills these with depth-scaled stds).
  torch::NoGradGuard no_grad;
  for (auto* w : {&w1, &w2, &w3}) torch::nn::init::normal_(*w, 0.0, 0.02);
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x, const std::vector<int64_t>& counts) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == w1.size(0), "Experts: got ", counts.size(),
              " token counts for ", w1.size(0), " experts");
  std::vector<torch::Tensor> ys;
  int64_t start = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    auto h = x.narrow(0, start, counts[e]);
    const auto i = static_cast<int64_t>(e);
    ys.push_back(at::linear(at::silu(at::linear(h, w1[i])) * at::linear(h, w3[i]), w2[i]));
    start += counts[e];
  }
  TORCH_CHECK(start == x.size(0), "Experts: counts sum to ", start, " but x has ", x.size(0),
              " rows");
  return ys.empty() ? x.new_zeros(x.sizes()) : at::cat(ys, 0);
}

MoEImpl::MoEImpl(const MixtralOptions& o) : n_experts(o.n_experts), top_k(o.top_k) {
  TORCH_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, "Mixtral: top_k (", o.top_k,
              ") must be in [1, n_experts = ", o.n_experts, "]");
  router =
      register_module("router", Linear(torch::nn::LinearOptions(o.dim, o.n_experts).bias(false)));
  experts = register_module("experts", Experts(o.n_experts, o.dim, o.ffn_dim));
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  auto flat = x.reshape({-1, x.size(-1)});  // [N, dim]
  router_logits = call(router, flat);       // [N, E]
  // Softmax over all experts (fp32), keep the top k, renormalize them to sum to 1.
  auto [top_p, top_e] = at::softmax(router_logits, -1, at::kFloat).topk(top_k, -1);
  auto weights = (top_p / top_p.sum(-1, /*keepdim=*/true)).to(x.scalar_type());
  // Group the N*k (token, expert) assignments by expert; a stable sort keeps token order inside
  // each group. Dropless: every assignment is computed.
  auto assigned = top_e.reshape({-1});
  auto order = std::get<1>(assigned.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0));
  auto token = order.div(top_k, "floor");
  // Read through item(), not a raw pointer, so tensors without host storage work too.
  auto counts_t = at::bincount(assigned, {}, n_experts);
  std::vector<int64_t> counts(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) counts[e] = counts_t[e].item<int64_t>();
  auto y = call(experts, flat.index_select(0, token), counts);
  y = y * weights.reshape({-1}).index_select(0, order).unsqueeze(-1);
  return at::zeros_like(flat).index_add(0, token, y).view(x.sizes());
}

MixtralBlockImpl::MixtralBlockImpl(const MixtralOptions& o) {
  attention_norm = register_module("attention_norm", RMSNorm(o.dim, o.norm_eps));
  attention = register_module("attention", LlamaAttention(o.llama()));
  ffn_norm = register_module("ffn_norm", RMSNorm(o.dim, o.norm_eps));
  feed_forward = register_module("feed_forward", MoE(o));
}

torch::Tensor MixtralBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin) {
  auto h = x + call(attention, call(attention_norm, x), cos, sin);
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

torch::Tensor MixtralImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= options.max_seq_len, "Mixtral: sequence length ", T, " exceeds max_seq_len ",
              options.max_seq_len);
  auto cos = rope_cos.narrow(0, 0, T), sin = rope_sin.narrow(0, 0, T);
  auto x = call(tok_embeddings, tokens);
  for (size_t i = 0; i < layers->size(); ++i)
    x = call(layers->ptr<MixtralBlockImpl>(i), x, cos, sin);
  x = call(norm, x);
  return output ? call(output, x) : at::linear(x, tok_embeddings->weight);
}

torch::Tensor load_balancing_stats(const std::vector<torch::Tensor>& router_logits,
                                   int64_t n_experts, int64_t top_k) {
  TORCH_CHECK(!router_logits.empty(), "load_balancing_loss: no router logits (run forward first)");
  torch::Tensor assignments, prob_sum;
  int64_t rows = 0;
  for (const auto& logits : router_logits) {
    auto probs = at::softmax(logits, -1, at::kFloat);
    auto chosen = std::get<1>(probs.topk(top_k, -1));
    auto counts =
        at::one_hot(chosen.reshape({-1}), n_experts).sum(0).to(at::kFloat);  // no gradient
    auto psum = probs.sum(0);
    assignments = assignments.defined() ? assignments + counts : counts;
    prob_sum = prob_sum.defined() ? prob_sum + psum : psum;
    rows += logits.size(0);
  }
  return at::cat({assignments, prob_sum, at::full({1}, static_cast<double>(rows), prob_sum.options())});
}

torch::Tensor load_balancing_from_stats(const torch::Tensor& stats, int64_t n_experts) {
  const auto rows = stats.narrow(0, 2 * n_experts, 1);
  return n_experts *
         ((stats.narrow(0, 0, n_experts) / rows) * (stats.narrow(0, n_experts, n_experts) / rows)).sum();
}

torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits,
                                  int64_t n_experts, int64_t top_k) {
  return load_balancing_from_stats(load_balancing_stats(router_logits, n_experts, top_k), n_experts);
}

torch::Tensor MixtralImpl::aux_loss() const {
  std::vector<torch::Tensor> logits;
  for (size_t i = 0; i < layers->size(); ++i) {
    const auto& l = layers->ptr<MixtralBlockImpl>(i)->feed_forward->router_logits;
    TORCH_CHECK(l.defined(), "Mixtral::aux_loss: no router logits yet; call forward first");
    TORCH_CHECK(
        !(at::GradMode::is_enabled() && l.is_leaf() && !l.requires_grad() &&
          layers->ptr<MixtralBlockImpl>(i)->feed_forward->router->weight.requires_grad()),
        "Mixtral::aux_loss: layer ", i,
        "'s router logits were computed without autograd (no_grad or ",
        "activation checkpointing), so the loss would have no gradient; run forward with autograd");
    logits.push_back(l);
  }
  return load_balancing_loss(logits, options.n_experts, options.top_k);
}

}  // namespace models
