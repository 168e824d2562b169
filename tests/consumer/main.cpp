// An embedder of the installed vescale (tests/consumer/run_consumer.cmake starts it on 2 ranks
// with the installed vescale-run). With the installed headers and libraries only, it
//   1. builds a tiny LLaMA from the installed models (vescale::models), parallelizes it with a
//      tensor-parallel plan over both ranks (vescale::vescale) and runs one forward and backward;
//   2. trains the same model through the installed Trainer (vescale::train) for a few steps,
//      with that plan, on a token file it writes, and checks that the loss falls.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <vescale/dtensor/dtensor.h>
#include <vescale/nn/module_hooks.h>
#include <vescale/plan/parallelize.h>
#include <vescale/plan/plan.h>
#include <vescale/random/random.h>
#include <vescale/tokenizer/token_file.h>
#include <vescale/train/config.h>
#include <vescale/train/trainer.h>
#include <vescale/vescale.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "vescale/models/llama/llama.h"  // include/vescale/models/, from vescale::models

namespace {

const char* kPlan = R"J({
  "mesh": ["tp"],
  "params": {
    "layers.*.attention.w[qkv].weight": ["Shard(0)"],
    "layers.*.attention.wo.weight": ["Shard(1)"],
    "layers.*.feed_forward.w[13].weight": ["Shard(0)"],
    "layers.*.feed_forward.w2.weight": ["Shard(1)"],
    "*": ["Replicate"]
  },
  "forward": {
    "layers.*.attention": {"input": [["Replicate"]], "output": [["Replicate"]]},
    "layers.*.feed_forward": {"input": [["Replicate"]], "output": [["Replicate"]]}
  }
})J";

bool check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "consumer: FAILED: %s\n", what);
  return ok;
}

}  // namespace

int main() {
  using namespace vescale;
  dist::init({.device = "cpu"});
  const int rank = dist::rank();
  bool ok = check(dist::world_size() == 2, "two ranks (run it under vescale-run -n 2)");
  auto mesh = DeviceMesh::init({{"tp", 2}});
  { std::ofstream(("plan_" + std::to_string(rank) + ".json").c_str()) << kPlan; }
  const std::string plan_file = "plan_" + std::to_string(rank) + ".json";

  // 1. The installed models, parallelized by a plan.
  vescale::models::LlamaOptions o;
  o.vocab_size = 64, o.dim = 32, o.n_layers = 2, o.n_heads = 4, o.n_kv_heads = 2;
  o.ffn_dim = 64, o.max_seq_len = 16;
  random::manual_seed(5);
  vescale::models::Llama llama(o);
  plan::parallelize(*llama, plan::Plan::from_json_file(plan_file), mesh,
                    {.init = [&] { llama->init_weights(); }});
  ok &= check(dtensor::is_dtensor(llama->named_parameters()["layers.0.attention.wq.weight"]),
              "wq is a DTensor after parallelize");
  at::Tensor tokens = at::arange(2 * 9, at::kLong).reshape({2, 9}) % o.vocab_size;
  at::Tensor logits = vescale::nn::call(llama, tokens.slice(1, 0, 8));
  at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, o.vocab_size}),
                                           tokens.slice(1, 1, 9).reshape({-1}));
  loss.backward();
  const double first = dtensor::full_tensor(loss.detach()).item<double>();
  ok &= check(std::isfinite(first) && std::abs(first - std::log(64.0)) < 1.0,
              "the untrained loss is near ln(vocab)");
  plan::remove_forward_hooks(*llama);

  // 2. The installed Trainer, with the same plan and a token file of a repeating pattern.
  const std::string data = "tokens_" + std::to_string(rank) + ".bin";
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 4096; ++i) ids.push_back((i * 7) % 61);
  tokenizer::write_token_file(data, ids);
  const std::string config = R"({
    "model": {"type": "llama", "vocab_size": 64, "dim": 32, "n_layers": 2, "n_heads": 4,
              "n_kv_heads": 2, "ffn_dim": 64, "max_seq_len": 16},
    "parallel": {"mesh": {"tp": 2}, "plan": ")" +
                             plan_file + R"("},
    "train": {"steps": 30, "batch_size": 4, "seq_len": 16, "lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2,
              "log_every": 10},
    "data": {"train": [")" + data +
                             R"("], "val": [")" + data + R"("]}
  })";
  train::Trainer trainer(train::Config::from_json(config, "consumer"), mesh);
  const auto steps = trainer.run();
  ok &= check(steps.size() == 30, "30 steps ran");
  if (!steps.empty()) {
    if (rank == 0)
      std::printf("consumer: %s, Trainer loss %.3f -> %.3f\n", mesh.to_string().c_str(),
                  steps.front().loss, steps.back().loss);
    ok &= check(steps.back().loss < 0.7 * steps.front().loss, "the Trainer's loss falls");
  }
  dist::shutdown();
  return ok ? 0 : 1;
}
