// GPT-2 in plain libtorch: the parameter count of the 124M config, HF-style names, causality,
// the tied head, and that a tiny model learns a fixed batch.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>

#include "vescale/models/gpt/gpt.h"

using vescale::models::GPT;
using vescale::models::GPTOptions;

TEST_CASE("GPT-2 124M has 124,439,808 parameters with HF-style names", "[models]") {
  GPT model(GPTOptions{});
  int64_t n = 0;
  for (auto& p : model->parameters()) n += p.numel();
  // wte 38,597,376 + wpe 786,432 + 12 blocks x 7,087,872 + ln_f 1,536 (the head is tied)
  CHECK(n == 124439808);
  auto names = model->named_parameters().keys();
  CHECK(std::find(names.begin(), names.end(), "h.11.attn.c_attn.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "h.0.mlp.c_proj.bias") != names.end());
  CHECK(std::find(names.begin(), names.end(), "ln_f.weight") != names.end());
}

TEST_CASE("GPT is causal and its head is the token embedding", "[models]") {
  GPTOptions o{.vocab_size = 50, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 4};
  GPT model(o);
  model->eval();
  auto tokens = at::randint(50, {2, 10}, at::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == c10::IntArrayRef({2, 10, 50}));
  auto changed = tokens.clone();
  changed.index_put_({at::indexing::Slice(), 7}, (tokens.select(1, 7) + 1) % 50);
  auto logits2 = model->forward(changed);
  CHECK(at::allclose(logits.narrow(1, 0, 7),
                     logits2.narrow(1, 0, 7)));  // the past ignores the future
  CHECK(!at::allclose(logits.narrow(1, 7, 1), logits2.narrow(1, 7, 1)));
  logits.sum().backward();
  // The LM head gradient lands on wte, for tokens never seen in the input too.
  CHECK(model->wte->weight.grad().abs().sum().item<float>() > 0);
  CHECK_THROWS_WITH(model->forward(at::zeros({1, 17}, at::kLong)),
                    Catch::Matchers::Contains("exceeds n_positions 16"));
}

TEST_CASE("a tiny GPT overfits a fixed batch", "[models]") {
  torch::manual_seed(0);
  GPTOptions o{.vocab_size = 32, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 2};
  GPT model(o);
  auto tokens = at::randint(32, {4, 17}, at::kLong);
  auto x = tokens.narrow(1, 0, 16), y = tokens.narrow(1, 1, 16);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    auto loss = at::cross_entropy_loss(model->forward(x).reshape({-1, 32}), y.reshape({-1}));
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  CHECK(first == Approx(std::log(32.0)).margin(0.3));  // near uniform at init
  CHECK(last < 0.5);                                   // memorized
}
