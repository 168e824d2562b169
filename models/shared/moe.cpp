// The mixture of experts (moe.h): the module, the MoE transformer's losses, loads and bias.
#include "vescale/models/shared/moe.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <string>
#include <tuple>

#include "vescale/common/check.h"
#include "vescale/kernels/expert_routing.h"
#include "vescale/kernels/grouped_mm.h"
#include "vescale/nn/module_hooks.h"

namespace vescale::models {

using vescale::nn::call;
namespace kernels = vescale::kernels;

ExpertsImpl::ExpertsImpl(int64_t n_experts, int64_t dim, int64_t hidden, double capacity_factor)
    : capacity(capacity_factor) {
  w1 = register_parameter("w1", torch::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({n_experts, hidden, dim}));
  // Usable on its own (MoETransformerImpl::init_weights refills these with depth-scaled stds).
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

MoEImpl::MoEImpl(int64_t dim, int64_t hidden, const MoEOptions& o)
    : n_experts(o.n_experts), top_k(o.top_k), normalize_top_k(o.normalize_top_k) {
  TORCH_CHECK(o.top_k >= 1 && o.top_k <= o.n_experts, "MoE: top_k (", o.top_k,
              ") must be in [1, n_experts = ", o.n_experts, "]");
  router = register_module("router", Linear(torch::nn::LinearOptions(dim, o.n_experts).bias(false)));
  experts = register_module("experts", Experts(o.n_experts, dim, hidden, o.capacity_factor));
  if (o.expert_bias_rate > 0)
    expert_bias = register_buffer("expert_bias", torch::zeros({o.n_experts}));
}

torch::Tensor MoEImpl::forward(const torch::Tensor& x) {
  auto flat = x.reshape({-1, x.size(-1)});  // [N, dim]
  router_logits = call(router, flat);       // [N, E]
  // Softmax over all experts (fp32), keep the top k, renormalize them to sum to 1 (unless the
  // family says not). The expert bias (when on) moves the choice only; the gates stay the
  // router's probabilities.
  auto probs = at::softmax(router_logits, -1, at::kFloat);
  torch::Tensor top_p, top_e;
  if (expert_bias.defined()) {
    top_e = std::get<1>((probs + expert_bias).topk(top_k, -1));
    top_p = probs.gather(-1, top_e);
  } else {
    std::tie(top_p, top_e) = probs.topk(top_k, -1);
  }
  auto gates = (normalize_top_k ? top_p / top_p.sum(-1, /*keepdim=*/true) : top_p)
                   .to(x.scalar_type());
  if (is_training() && !vescale::nn::recomputing()) {
    torch::NoGradGuard no_grad;
    auto load = at::one_hot(top_e.reshape({-1}), n_experts).sum(0).to(at::kFloat);
    expert_load = expert_load.defined() ? expert_load + load : load;
  }
  return call(experts, flat, top_e, gates).view(x.sizes());
}

namespace {
// The MoE of a transformer block, or null when `block` is none or holds another feed-forward.
MoEImpl* find_moe(torch::nn::Module& block) {
  auto* b = dynamic_cast<TransformerBlockImpl*>(&block);
  return b ? dynamic_cast<MoEImpl*>(b->feed_forward.get()) : nullptr;
}
}  // namespace

MoEImpl& moe_of(torch::nn::Module& block) {
  MoEImpl* moe = find_moe(block);
  VESCALE_CHECK(moe != nullptr, "moe_of: module '", block.name(),
                "' is not a transformer block with a mixture of experts");
  return *moe;
}

MoETransformerImpl::MoETransformerImpl(const TrunkOptions& trunk, int64_t expert_hidden,
                                       const MoEOptions& o, std::string family)
    : TransformerImpl(
          trunk,
          [&](int64_t) { return std::make_shared<MoEImpl>(trunk.llama.dim, expert_hidden, o); },
          std::move(family)),
      moe(o) {}

void MoETransformerImpl::init_weights() {
  init_trunk([this](size_t i, const InitStd& init) {
    auto& m = moe_of(*layers->ptr(i));
    torch::nn::init::normal_(m.router->weight, 0.0, init.in);
    torch::nn::init::normal_(m.experts->w1, 0.0, init.in);
    torch::nn::init::normal_(m.experts->w2, 0.0, init.resid);
    torch::nn::init::normal_(m.experts->w3, 0.0, init.resid);
  });
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

torch::Tensor routing_loss_from_stats(const torch::Tensor& stats, const MoEOptions& o) {
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
std::vector<torch::Tensor> checked_router_logits(const MoETransformerImpl& model,
                                                 const char* who) {
  std::vector<torch::Tensor> logits;
  const auto& layers = model.layers;
  const std::string& family = model.family;
  for (size_t i = 0; i < layers->size(); ++i) {
    const MoEImpl* moe = &moe_of(*layers->ptr(i));
    const auto& l = moe->router_logits;
    TORCH_CHECK(l.defined(), family, "::", who, ": no router logits yet; call forward first");
    TORCH_CHECK(!(at::GradMode::is_enabled() && l.is_leaf() && !l.requires_grad() &&
                  moe->router->weight.requires_grad()),
                family, "::", who, ": layer ", i,
                "'s router logits were computed without autograd (no_grad or ",
                "activation checkpointing), so the loss would have no gradient; run forward with "
                "autograd");
    logits.push_back(l);
  }
  return logits;
}
}  // namespace

torch::Tensor MoETransformerImpl::aux_loss() const {
  return load_balancing_loss(checked_router_logits(*this, "aux_loss"), moe.n_experts,
                             moe.top_k);
}

torch::Tensor MoETransformerImpl::z_loss() const {
  return router_z_loss(checked_router_logits(*this, "z_loss"));
}

torch::Tensor MoETransformerImpl::routing_loss() const {
  return routing_loss_from_stats(routing_stats(checked_router_logits(*this, "routing_loss"),
                                               moe.n_experts, moe.top_k),
                                 moe);
}

void MoETransformerImpl::update_expert_bias(const std::vector<torch::Tensor>& loads) {
  if (moe.expert_bias_rate <= 0) return;
  TORCH_CHECK(loads.size() == layers->size(), family, "::update_expert_bias: ", loads.size(),
              " loads for ", layers->size(), " layers");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (!loads[i].defined()) continue;  // a layer of another pipeline stage
    auto& bias = moe_of(*layers->ptr(i)).expert_bias;
    auto load = loads[i].to(bias.device(), at::kFloat);
    bias.add_((load.mean() - load).sign() * moe.expert_bias_rate);
  }
}

void describe_moe(Model& m, MoETransformerImpl* l) {
  const MoEOptions& o = l->moe;
  const bool routing_loss = o.aux_loss_coef > 0 || o.router_z_loss_coef > 0;
  if (routing_loss)
    m.aux_loss = [impl = std::static_pointer_cast<MoETransformerImpl>(m.module)] {
      return impl->routing_loss();
    };
  m.block_side_outputs = [family = l->family](torch::nn::Module& block) {
    MoEImpl* moe = find_moe(block);
    VESCALE_CHECK(moe != nullptr, "activation checkpointing: a ", family,
                  " block pattern matched a module that is not a block");
    return std::vector<at::Tensor*>{&moe->router_logits};
  };
  if (routing_loss) {
    m.aux_over_layers.stats = [l](const std::vector<std::string>& layers) {
      std::vector<at::Tensor> logits;
      for (const auto& name : layers)
        if (name.rfind("layers.", 0) == 0)
          logits.push_back(moe_of(*l->layers->ptr(std::stoul(name.substr(7)))).router_logits);
      return routing_stats(logits, l->moe.n_experts, l->moe.top_k);
    };
    m.aux_over_layers.loss = [l](const at::Tensor& total) {
      return routing_loss_from_stats(total, l->moe);
    };
  }
  for (size_t i = 0; i < l->layers->size(); ++i)
    m.moe.layers.push_back("layers." + std::to_string(i));
  m.moe.n_experts = o.n_experts;
  m.moe.expert_params = "layers.*.feed_forward.experts.*";
  m.moe.take_loads = [l] {
    std::vector<at::Tensor> loads;
    for (size_t i = 0; i < l->layers->size(); ++i) {
      auto& load = moe_of(*l->layers->ptr(i)).expert_load;
      loads.push_back(load);
      load = at::Tensor();
    }
    return loads;
  };
  if (o.expert_bias_rate > 0) {
    m.state_buffers = {"layers.*.feed_forward.expert_bias"};
    m.moe.update_bias = [l](const std::vector<at::Tensor>& loads) { l->update_expert_bias(loads); };
  }
}

}  // namespace vescale::models
