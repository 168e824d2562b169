// Generation: the KV cache gives the logits of the full forward, sample_token's choices by hand,
// generate's limits and errors, and (the [hf_generate] case, after the hf_reference fixture)
// greedy tokens equal to transformers' generate for LLaMA, Mixtral, GPT-2, Qwen3 and
// Qwen3-MoE, and Qwen3's logits, loss and aux loss against transformers'.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "common/hf_reference_diff.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/models/shared/moe.h"
#include "vescale/generate/generate.h"
#include "vescale/train/load_model.h"

using namespace vescale;
using namespace vescale::train;
using vescale::generate::SamplingOptions;
using vescale::generate::check_sampling;
using vescale::generate::sample_token;

namespace {

Config tiny(const std::string& type) {
  std::string model = R"({"type": "llama", "vocab_size": 64, "dim": 32, "n_layers": 2,
      "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 48, "max_seq_len": 24})";
  if (type == "gpt")
    model = R"({"type": "gpt", "vocab_size": 64, "n_embd": 32, "n_layer": 2, "n_head": 4,
        "n_positions": 24, "dropout": 0.0})";
  if (type == "mixtral")
    model = R"({"type": "mixtral", "vocab_size": 64, "dim": 32, "n_layers": 2, "n_heads": 4,
        "n_kv_heads": 2, "ffn_dim": 32, "n_experts": 4, "top_k": 2, "max_seq_len": 24})";
  return Config::from_json(R"({"train": {"seq_len": 16}, "model": )" + model + "}");
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace

TEST_CASE(
    "the KV cache gives the full forward's logits: prefill, a chunk after it, then single tokens",
    "[generate]") {
  for (const std::string type : {"gpt", "llama", "mixtral"}) {
    INFO(type);
    at::manual_seed(7);
    const Config c = tiny(type);
    auto m = build_model(c.model);
    m.module->eval();
    at::NoGradGuard no_grad;
    const auto tokens = at::randint(0, 64, {2, 12}, at::kLong);
    const auto full = m.forward(tokens);  // [2, 12, 64]
    vescale::models::KVCache cache(c.model.options->n_layers(), c.model.options->max_seq_len());
    std::vector<at::Tensor> parts;
    parts.push_back(m.forward_cached(tokens.narrow(1, 0, 5), cache));  // positions 0-4
    parts.push_back(m.forward_cached(tokens.narrow(1, 5, 4), cache));  // 5-8: a masked chunk
    for (int64_t p = 9; p < 12; ++p)
      parts.push_back(m.forward_cached(tokens.narrow(1, p, 1), cache));
    CHECK(cache.length() == 12);
    const auto cached = at::cat(parts, 1);
    CHECK(max_diff(cached, full) < 1e-5);
    CHECK(full.abs().max().item<double>() > 0.1);  // not trivially zero
  }
}

TEST_CASE("sample_token: greedy takes the first largest, and top-k 1 is greedy whatever the seed",
          "[generate]") {
  const auto logits = at::tensor({1.0f, 3.0f, 2.0f, 3.0f});
  SamplingOptions greedy;
  greedy.temperature = 0;
  CHECK(sample_token(logits, greedy, 0) == 1);  // ids 1 and 3 tie: the lower
  SamplingOptions k1;
  k1.top_k = 1;
  for (uint64_t seed = 1; seed < 50; ++seed) {
    k1.seed = seed;
    CHECK(sample_token(logits, k1, static_cast<int64_t>(seed)) == 1);
  }
}

TEST_CASE(
    "sample_token draws by the softmax, top-p keeps the smallest set reaching p, and the "
    "same (seed, position) gives the same token",
    "[generate]") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 as logits.
  const auto logits = at::tensor({0.5, 0.3, 0.15, 0.05}, at::kDouble).log().to(at::kFloat);
  SamplingOptions s;
  s.seed = 11;
  const int n = 20000;
  std::vector<int> count(4);
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(sample_token(logits, s, i))];
  for (int k = 0; k < 4; ++k)
    CHECK(std::abs(count[k] / double(n) - std::vector{0.5, 0.3, 0.15, 0.05}[k]) < 0.012);
  // top_p 0.7: {0, 1} (0.5 < 0.7 <= 0.8), renormalized to 0.625 / 0.375.
  s.top_p = 0.7;
  std::vector<int> kept(4);
  for (int i = 0; i < n; ++i) ++kept[static_cast<size_t>(sample_token(logits, s, i))];
  CHECK(kept[2] == 0);
  CHECK(kept[3] == 0);
  CHECK(std::abs(kept[0] / double(n) - 0.625) < 0.012);
  // Temperature 0.5 squares the odds: 0.25, 0.09, 0.0225, 0.0025 over their sum.
  s.top_p = 1;
  s.temperature = 0.5;
  std::vector<int> cold(4);
  for (int i = 0; i < n; ++i) ++cold[static_cast<size_t>(sample_token(logits, s, i))];
  CHECK(std::abs(cold[0] / double(n) - 0.25 / 0.365) < 0.012);
  // Deterministic in (seed, position); another seed changes some choices.
  s.temperature = 1;
  int same = 0, differ = 0;
  SamplingOptions other = s;
  other.seed = 12;
  for (int i = 0; i < 200; ++i) {
    same += sample_token(logits, s, i) == sample_token(logits, s, i);
    differ += sample_token(logits, s, i) != sample_token(logits, other, i);
  }
  CHECK(same == 200);
  CHECK(differ > 20);
}

TEST_CASE(
    "generate stops at max_new_tokens, at the model's max_seq_len and after a stop id, and names "
    "bad prompts",
    "[generate]") {
  at::manual_seed(3);
  const Config c = tiny("llama");
  auto m = build_model(c.model);
  const auto& o = *c.model.options;
  SamplingOptions s;
  s.max_new_tokens = 5;
  CHECK(generate::generate(m, o, {1, 2, 3}, s).size() == 5);
  s.max_new_tokens = 100;
  CHECK(generate::generate(m, o, {1, 2, 3}, s).size() == 21);  // 24 - 3
  s.max_new_tokens = 10;
  const auto free_run = generate::generate(m, o, {1, 2, 3}, s);
  s.stop_ids = {free_run[3]};
  const auto stopped = generate::generate(m, o, {1, 2, 3}, s);
  CHECK(stopped.size() <= 4);
  CHECK(stopped.back() == free_run[3]);
  CHECK(m.module->is_training());  // restored
  CHECK_THROWS_WITH(generate::generate(m, o, {}, s), Catch::Contains("prompt is empty"));
  CHECK_THROWS_WITH(generate::generate(m, o, std::vector<int64_t>(24, 1), s),
                    Catch::Contains("max_seq_len is 24"));
  CHECK_THROWS_WITH(generate::generate(m, o, {1, 64}, s), Catch::Contains("prompt token 64"));
  s.top_p = 0;
  CHECK_THROWS_WITH(generate::generate(m, o, {1}, s), Catch::Contains("top_p"));
}

TEST_CASE("greedy generation equals transformers' generate token for token", "[.][hf_generate]") {
  for (const std::string name : {"llama", "mixtral", "gpt2", "qwen3", "qwen3_moe"}) {
    INFO(name);
    const std::string dir = std::string(HF_REFERENCE_DIR) + "/" + name;
    const auto ref = checkpoint::load_safetensors(dir + "/reference.safetensors");
    const auto prompt_t = ref.at("gen_prompt"), want_t = ref.at("gen_greedy");
    std::vector<int64_t> prompt(prompt_t.data_ptr<int64_t>(),
                                prompt_t.data_ptr<int64_t>() + prompt_t.numel());
    std::vector<int64_t> want(want_t.data_ptr<int64_t>(),
                              want_t.data_ptr<int64_t>() + want_t.numel());
    auto loaded = load_hf_model(dir);
    SamplingOptions s;
    s.temperature = 0;
    s.max_new_tokens = static_cast<int64_t>(want.size());
    CHECK(generate::generate(loaded.model, *loaded.config.model.options, prompt, s) == want);
  }
}

TEST_CASE("Qwen3 and Qwen3-MoE loaded from transformers folders give their logits, loss and aux "
          "loss to 1e-5",
          "[.][hf_generate]") {
  for (const std::string name : {"qwen3", "qwen3_moe"}) {
    INFO(name);
    const std::string dir = std::string(HF_REFERENCE_DIR) + "/" + name;
    const auto ref = checkpoint::load_safetensors(dir + "/reference.safetensors");
    auto loaded = load_hf_model(dir);  // config.json through the registry, then the weights
    CHECK(loaded.config.model.type == name);
    c10::NoGradGuard no_grad;
    loaded.model.module->eval();
    const auto d = vescale::test::hf_reference_diffs(loaded.model.forward(ref.at("tokens")), ref);
    vescale::test::print_hf_diffs(name, d, ref);
    CHECK(d.logits <= 1e-5);
    CHECK(d.loss <= 1e-5);
    if (ref.count("aux_loss")) {
      // The aux loss needs the router logits with autograd off: read it directly.
      auto& moe = dynamic_cast<models::MoETransformerImpl&>(*loaded.model.module);
      c10::AutoGradMode off(false);
      const double aux = moe.aux_loss().item<double>(), hf = ref.at("aux_loss").item<double>();
      CHECK(aux == Approx(hf).epsilon(1e-5));
    }
  }
}
