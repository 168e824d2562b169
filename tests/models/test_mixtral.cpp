// Mixtral in plain libtorch: the 8x7B parameter count (meta device), the sparse MoE against a
// plain per-token loop (routing, renormalized top-k weights, dropless under skew), the
// load-balancing loss against a hand computation, causality, and overfitting a batch.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "vescale/models/shared/meta_device.h"
#include "vescale/models/mixtral/mixtral.h"

using vescale::models::Mixtral;
using vescale::models::MixtralOptions;

namespace {
MixtralOptions tiny() {
  return MixtralOptions{.llama = {.vocab_size = 64,
                                  .dim = 32,
                                  .n_layers = 2,
                                  .n_heads = 4,
                                  .n_kv_heads = 2,
                                  .ffn_dim = 24,
                                  .norm_eps = 1e-5,
                                  .rope_theta = 10000.0,
                                  .max_seq_len = 16},
                        .moe = {.n_experts = 4, .top_k = 2}};
}

// For each token on its own: softmax over all experts, pick the k largest by a plain sort,
// renormalize, and add up the chosen experts' SwiGLU outputs.
at::Tensor naive_moe(const vescale::models::MoEImpl& moe, const at::Tensor& x) {
  auto flat = x.reshape({-1, x.size(-1)}).to(at::kDouble);
  auto router = moe.router->weight.to(at::kDouble);
  auto w1 = moe.experts->w1.to(at::kDouble), w2 = moe.experts->w2.to(at::kDouble),
       w3 = moe.experts->w3.to(at::kDouble);
  auto out = at::zeros_like(flat);
  for (int64_t n = 0; n < flat.size(0); ++n) {
    auto xn = flat[n];
    std::vector<double> logits(moe.n_experts);
    for (int64_t e = 0; e < moe.n_experts; ++e) logits[e] = at::dot(router[e], xn).item<double>();
    std::vector<int64_t> idx(moe.n_experts);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    // The softmax over all experts, top-k, renormalized == a softmax over the k chosen logits.
    double z = 0;
    for (int64_t j = 0; j < moe.top_k; ++j) z += std::exp(logits[idx[j]] - logits[idx[0]]);
    for (int64_t j = 0; j < moe.top_k; ++j) {
      const int64_t e = idx[j];
      const double w = std::exp(logits[e] - logits[idx[0]]) / z;
      auto g = at::matmul(w1[e], xn), u = at::matmul(w3[e], xn);
      auto h = g / (1 + at::exp(-g)) * u;  // silu(g) * u
      out[n] += w * at::matmul(w2[e], h);
    }
  }
  return out.view(x.sizes());
}
}  // namespace

TEST_CASE("Mixtral 8x7B has 46.7B parameters, counted and built on the meta device", "[models]") {
  // 2 x 32000 x 4096 + 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 8 x 3 x 4096 x 14336 + 8 x 4096 + 2 x
  // 4096) + 4096
  CHECK(vescale::models::mixtral_parameter_count(vescale::models::mixtral_8x7b()) == 46702792704);
  Mixtral model{nullptr};
  {
    vescale::models::MetaDeviceScope meta;
    model = Mixtral(vescale::models::mixtral_8x7b());
  }
  CHECK(vescale::models::count_parameters(*model) == 46702792704);
  auto params = model->named_parameters();
  CHECK(params["layers.3.feed_forward.router.weight"].sizes() == c10::IntArrayRef({8, 4096}));
  CHECK(params["layers.3.feed_forward.experts.w1"].sizes() == c10::IntArrayRef({8, 14336, 4096}));
  CHECK(params["layers.3.feed_forward.experts.w2"].sizes() == c10::IntArrayRef({8, 4096, 14336}));
  CHECK(params["layers.3.attention.wk.weight"].sizes() == c10::IntArrayRef({1024, 4096}));
}

TEST_CASE("the sparse MoE equals a per-token loop over the top-k experts", "[models]") {
  torch::manual_seed(3);
  auto o = tiny();
  for (int64_t k : {1, 2, 3}) {
    o.moe.top_k = k;
    vescale::models::MoE moe(o.llama.dim, o.llama.ffn_dim, o.moe);
    {
      torch::NoGradGuard ng;
      moe->router->weight.normal_(0, 0.5);
      moe->experts->w1.normal_(0, 0.2);
      moe->experts->w2.normal_(0, 0.2);
      moe->experts->w3.normal_(0, 0.2);
    }
    auto x = at::randn({2, 5, 32});
    auto y = moe->forward(x);
    CHECK(at::allclose(y.to(at::kDouble), naive_moe(*moe, x), 1e-5, 1e-6));
    CHECK(moe->router_logits.sizes() == c10::IntArrayRef({10, 4}));
  }
}

TEST_CASE("the MoE is dropless: every token reaches its experts however skewed the routing",
          "[models]") {
  auto o = tiny();
  vescale::models::MoE moe(o.llama.dim, o.llama.ffn_dim, o.moe);
  {
    torch::NoGradGuard ng;
    moe->router->weight.fill_(-1.0);
    moe->router->weight[0].fill_(1.0);  // positive tokens all prefer expert 0, then 1
    moe->router->weight[1].fill_(0.5);
    moe->experts->w1.normal_(0, 0.2);
    moe->experts->w2.normal_(0, 0.2);
    moe->experts->w3.normal_(0, 0.2);
  }
  auto x = at::rand({3, 7, 32}) + 0.1;
  auto y = moe->forward(x);
  auto chosen = std::get<1>(moe->router_logits.topk(2, -1));
  CHECK((chosen.select(1, 0) == 0).all().item<bool>());  // all 21 tokens on experts 0 and 1
  CHECK(at::allclose(y.to(at::kDouble), naive_moe(*moe, x), 1e-5, 1e-6));
  CHECK((y.abs().sum(-1) > 0).all().item<bool>());  // nobody dropped
}

TEST_CASE("the load-balancing loss matches a hand computation pooled over layers", "[models]") {
  torch::manual_seed(4);
  auto o = tiny();
  o.moe.n_experts = 5, o.moe.top_k = 2;
  Mixtral model(o);
  {
    torch::NoGradGuard ng;
    for (auto& l : *model->layers)
      vescale::models::moe_of(*l).router->weight.normal_(0, 0.3);
  }
  model->forward(at::randint(64, {2, 6}, at::kLong));
  auto aux = model->aux_loss();

  // E * sum_e (assignments to e / rows) * (summed probability of e / rows), rows over all layers.
  std::vector<double> assigned(5, 0), prob(5, 0);
  double rows = 0;
  for (auto& l : *model->layers) {
    auto logits = vescale::models::moe_of(*l).router_logits.to(at::kDouble);
    for (int64_t n = 0; n < logits.size(0); ++n, ++rows) {
      std::vector<double> p(5);
      double z = 0;
      for (int64_t e = 0; e < 5; ++e) z += p[e] = std::exp(logits[n][e].item<double>());
      for (int64_t e = 0; e < 5; ++e) prob[e] += p[e] / z;
      std::vector<int64_t> idx{0, 1, 2, 3, 4};
      std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      assigned[idx[0]] += 1, assigned[idx[1]] += 1;
    }
  }
  double expect = 0;
  for (int e = 0; e < 5; ++e) expect += (assigned[e] / rows) * (prob[e] / rows);
  expect *= 5;
  CHECK(aux.item<double>() == Approx(expect).epsilon(1e-5));

  // Gradient reaches the routers; a uniform router gives exactly k.
  aux.backward();
  CHECK(vescale::models::moe_of(*model->layers->ptr(0))
            .router->weight.grad()
            .abs()
            .sum()
            .item<double>() > 0);
  {
    torch::NoGradGuard ng;
    for (auto& l : *model->layers)
      vescale::models::moe_of(*l).router->weight.zero_();
  }
  model->forward(at::randint(64, {2, 6}, at::kLong));
  CHECK(model->aux_loss().item<double>() == Approx(2.0).epsilon(1e-6));
  // Logits from a no-grad forward would give a loss without gradient: that is an error.
  {
    torch::NoGradGuard ng;
    model->forward(at::randint(64, {1, 4}, at::kLong));
  }
  CHECK_THROWS_WITH(model->aux_loss(), Catch::Matchers::Contains("computed without autograd"));
}

TEST_CASE("Mixtral is causal", "[models]") {
  Mixtral model(tiny());
  auto tokens = at::randint(64, {2, 10}, at::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == c10::IntArrayRef({2, 10, 64}));
  auto changed = tokens.clone();
  changed.index_put_({at::indexing::Slice(), 5}, (tokens.select(1, 5) + 1) % 64);
  auto logits2 = model->forward(changed);
  CHECK(at::allclose(logits.narrow(1, 0, 5), logits2.narrow(1, 0, 5)));
  CHECK(!at::allclose(logits.narrow(1, 5, 1), logits2.narrow(1, 5, 1)));
}

TEST_CASE("a tiny Mixtral overfits a fixed batch with the aux loss added", "[models]") {
  torch::manual_seed(0);
  Mixtral model(tiny());
  auto tokens = at::randint(64, {4, 17}, at::kLong);
  auto x = tokens.narrow(1, 0, 16), y = tokens.narrow(1, 1, 16);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    auto ce = at::cross_entropy_loss(model->forward(x).reshape({-1, 64}), y.reshape({-1}));
    (ce + 0.01 * model->aux_loss()).backward();
    opt.step();
    if (step == 0) first = ce.item<double>();
    last = ce.item<double>();
  }
  CHECK(first ==
        Approx(std::log(64.0) + 0.5).margin(0.4));  // head init gives logits of std ~1: +1/2
  CHECK(last < 0.5);
}

TEST_CASE("the router z-loss is the mean of logsumexp^2 per layer, summed over layers", "[models]") {
  torch::manual_seed(5);
  auto o = tiny();
  o.moe.router_z_loss_coef = 0.001, o.moe.aux_loss_coef = 0.02;
  Mixtral model(o);
  model->forward(at::randint(64, {2, 6}, at::kLong));
  double want = 0;
  for (auto& l : *model->layers) {
    auto logits = vescale::models::moe_of(*l).router_logits.to(at::kDouble);
    double layer = 0;
    for (int64_t n = 0; n < logits.size(0); ++n) {
      double s = 0;
      for (int64_t e = 0; e < logits.size(1); ++e) s += std::exp(logits[n][e].item<double>());
      layer += std::log(s) * std::log(s);
    }
    want += layer / static_cast<double>(logits.size(0));
  }
  CHECK(model->z_loss().item<double>() == Approx(want).epsilon(1e-6));
  // The trainer's term: both losses with their coefficients.
  CHECK(model->routing_loss().item<double>() ==
        Approx(0.02 * model->aux_loss().item<double>() + 0.001 * want).epsilon(1e-6));
}

TEST_CASE("the expert bias steers the choice of experts, not the gates", "[models]") {
  torch::manual_seed(6);
  auto o = tiny();
  o.moe.expert_bias_rate = 0.5;
  vescale::models::MoE moe(o.llama.dim, o.llama.ffn_dim, o.moe);
  REQUIRE(moe->expert_bias.defined());
  auto x = at::randn({2, 5, 32});
  auto plain = moe->forward(x);
  auto probs = at::softmax(moe->router_logits, -1);
  // A bias of 1 on expert 3 (more than any probability gap) puts it in every token's top 2.
  {
    torch::NoGradGuard no_grad;
    moe->expert_bias[3] = 1.0;
  }
  auto biased = moe->forward(x);
  // The reference: top-2 of probs + bias, gates from the probabilities alone, renormalized.
  auto chosen = std::get<1>((probs + moe->expert_bias).topk(2, -1));
  CHECK((chosen == 3).any(-1).all().item<bool>());
  auto p = probs.gather(-1, chosen);
  auto gates = p / p.sum(-1, true);
  auto flat = x.reshape({-1, 32});
  auto want = at::zeros_like(flat);
  for (int64_t n = 0; n < flat.size(0); ++n)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t e = chosen[n][j].item<int64_t>();
      auto h = flat[n];
      auto y = at::matmul(moe->experts->w2[e],
                          at::silu(at::matmul(moe->experts->w1[e], h)) * at::matmul(moe->experts->w3[e], h));
      want[n] += gates[n][j] * y;
    }
  CHECK(at::allclose(biased.reshape({-1, 32}), want, 1e-5, 1e-6));
  CHECK(!at::allclose(biased, plain, 1e-3, 1e-3));
}
