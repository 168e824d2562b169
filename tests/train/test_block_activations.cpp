// Each family's count of what a block keeps for backward (ModelSpec::block_activations, which
// the dry run and the planner's memory model use) against the bytes the counting allocator sees
// held after a forward with autograd: a model of two blocks minus the same model of one.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdio>
#include <string>
#include <vector>

#include "vescale/kernels/host_memory.h"
#include "vescale/models/model.h"
#include "vescale/train/config.h"
#include "vescale/train/dry_run.h"
#include "vescale/train/model_factory.h"

namespace {

constexpr int64_t kBatch = 2, kSeq = 64;

// Small shapes of each family, as model.* overrides.
const std::vector<std::string> kLlama = {"model.dim=128",       "model.n_heads=4",
                                         "model.n_kv_heads=2",  "model.ffn_dim=384",
                                         "model.vocab_size=64", "model.max_seq_len=64"};
const std::vector<std::string> kMixtral = {
    "model.dim=128",     "model.n_heads=4", "model.n_kv_heads=2",  "model.ffn_dim=192",
    "model.n_experts=4", "model.top_k=2",   "model.vocab_size=64", "model.max_seq_len=64"};
const std::vector<std::string> kGpt = {"model.n_embd=128", "model.n_head=4", "model.vocab_size=64",
                                       "model.n_positions=64"};

vescale::train::Config config(const std::string& type, int64_t layers,
                              const std::vector<std::string>& sets) {
  std::vector<std::string> all = {
      "model.type=\"" + type + "\"",
      (type == "gpt" ? "model.n_layer=" : "model.n_layers=") + std::to_string(layers),
      "train.seq_len=" + std::to_string(kSeq)};
  all.insert(all.end(), sets.begin(), sets.end());
  return vescale::train::Config::from_json("{}", "t.json", all);
}

// Bytes held after the forward (its graph alive) beyond those held before it.
double held_by_forward(const vescale::train::Config& c) {
  vescale::kernels::track_memory();
  auto model = vescale::train::build_model(c.model);
  model.module->train();
  const auto tokens = at::randint(0, c.model.vocab_size(), {kBatch, kSeq}, at::kLong);
  const int64_t before = vescale::kernels::memory_stats().current;
  at::Tensor logits = model.forward(tokens);
  const int64_t after = vescale::kernels::memory_stats().current;
  return static_cast<double>(after - before);
}

void check_family(const std::string& type, const std::vector<std::string>& sets) {
  const double measured =
      held_by_forward(config(type, 2, sets)) - held_by_forward(config(type, 1, sets));
  const auto c = config(type, 1, sets);
  const double counted = vescale::train::block_activation_bytes(
      vescale::train::block_activations(c.model), kSeq, kBatch, /*tp=*/1,
      /*sequence_parallel=*/false, /*fp32=*/true, /*keeps_probabilities=*/true);
  std::printf("%s: a block keeps %.0f bytes, counted %.0f (%+.1f%%)\n", type.c_str(), measured,
              counted, 100 * (counted - measured) / measured);
  CHECK(counted == Approx(measured).epsilon(0.02));
}

// The most held during a backward beyond what was held when it began, the parameters'
// gradients already allocated by an earlier backward (as for every micro-batch after the first).
double backward_beyond_held(const vescale::train::Config& c, int64_t batch) {
  vescale::kernels::track_memory();
  auto model = vescale::train::build_model(c.model);
  model.module->train();
  const auto tokens = at::randint(0, c.model.vocab_size(), {batch, kSeq}, at::kLong);
  model.forward(tokens).sum().backward();
  at::Tensor loss = model.forward(tokens).sum();
  const int64_t before = vescale::kernels::memory_stats().current;
  vescale::kernels::reset_peak_memory();
  loss.backward();
  return static_cast<double>(vescale::kernels::memory_stats().peak - before);
}

// The count is a sketch (which gradients are alive together depends on the op order, and at
// these few tokens a weight's gradient competes): within a factor of 2 of the measure, and far
// below a second block's activations, which the planner used to count.
void check_backward(const std::string& type, const std::vector<std::string>& sets) {
  constexpr int64_t kBackwardBatch = 8;  // 512 tokens
  const auto c = config(type, 1, sets);
  const double measured = backward_beyond_held(c, kBackwardBatch);
  const double counted = vescale::train::block_backward_bytes(
      vescale::train::block_activations(c.model), kSeq, kBackwardBatch, /*tp=*/1,
      /*sequence_parallel=*/false, /*fp32=*/true);
  const double block = vescale::train::block_activation_bytes(
      vescale::train::block_activations(c.model), kSeq, kBackwardBatch, 1, false, true, true);
  std::printf(
      "%s: a block's backward holds %.0f bytes beyond its saved tensors, counted %.0f "
      "(%+.1f%%); its activations %.0f\n",
      type.c_str(), measured, counted, 100 * (counted - measured) / measured, block);
  CHECK(counted >= 0.5 * measured);
  CHECK(counted <= 2 * measured);
  CHECK(measured < 0.25 * block);
}

}  // namespace

TEST_CASE("each family counts what its block's backward holds beside its saved tensors",
          "[models][memory]") {
  SECTION("llama") { check_backward("llama", kLlama); }
  SECTION("mixtral") { check_backward("mixtral", kMixtral); }
  SECTION("gpt") { check_backward("gpt", kGpt); }
}

TEST_CASE("each family counts what its block keeps for backward", "[models][memory]") {
  SECTION("llama") { check_family("llama", kLlama); }
  SECTION("mixtral") { check_family("mixtral", kMixtral); }
  SECTION("qwen3") {
    check_family("qwen3",
                 {"model.dim=128", "model.n_heads=4", "model.n_kv_heads=2", "model.head_dim=32",
                  "model.ffn_dim=384", "model.vocab_size=64", "model.max_seq_len=64"});
  }
  SECTION("gpt") { check_family("gpt", kGpt); }
}
