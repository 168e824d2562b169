// The trainer: dry-run shapes and counts, FLOPs, activation checkpointing (grads equal the
// plain model's, dropout on), NaN/inf stops, grad accumulation, bf16, and that loss falls.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/utils.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "vescale/models/gpt/gpt.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/common/check.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"
#include "vescale/parallel/activation_checkpoint.h"
#include "vescale/train/divergence_guard.h"
#include "vescale/train/dry_run.h"
#include "vescale/train/model_factory.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/train/trainer.h"

using namespace vescale::train;
using Catch::Matchers::Contains;

namespace {
Config tiny(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> o{"model.n_layer=2",    "model.n_embd=64",    "model.n_head=4",
                             "train.batch_size=4", "train.seq_len=32",   "train.warmup_steps=2",
                             "train.steps=4",      "train.eval_steps=2", "log.metrics_jsonl=\"\""};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return Config::from_file(VESCALE_SOURCE_DIR "/configs/nanogpt_tiny.json", o);
}

Config tiny_mixtral(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> o{"model.n_layers=2",   "model.dim=64",          "model.n_heads=4",
                             "model.n_kv_heads=2", "model.ffn_dim=64",      "train.batch_size=4",
                             "train.seq_len=32",   "train.warmup_steps=2",  "train.steps=4",
                             "train.eval_steps=2", "log.metrics_jsonl=\"\""};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return Config::from_file(VESCALE_SOURCE_DIR "/configs/mixtral_tiny.json", o);
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

std::map<std::string, at::Tensor> grads_of(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> g;
  for (auto& item : m.named_parameters()) g[item.key()] = item.value().grad().clone();
  return g;
}
}  // namespace

TEST_CASE("dry-run shapes come from a meta build: LLaMA-3 70B has 70.55B parameters", "[trainer]") {
  auto c = Config::from_file(VESCALE_SOURCE_DIR "/configs/llama3_70b.json");
  const int64_t n = parameter_count(parameter_shapes(c.model));
  // embeddings and head 2 x 128256 x 8192, 80 layers of attention (2 x 8192^2 + 2 x 1024 x 8192),
  // SwiGLU (3 x 8192 x 28672) and two norms, and the final norm; written out by hand:
  const int64_t layer = 2 * 8192LL * 8192 + 2 * 1024LL * 8192 + 3 * 8192LL * 28672 + 2 * 8192;
  CHECK(n == 2 * 128256LL * 8192 + 80 * layer + 8192);
  CHECK(std::fabs(static_cast<double>(n) / 1e9 - 70.55) < 0.1);
  auto m8x7 = Config::from_file(VESCALE_SOURCE_DIR "/configs/mixtral_8x7b.json");
  CHECK(parameter_count(parameter_shapes(m8x7.model)) ==
        46702792704LL);  // Mixtral's published size
  // nanoGPT's bias=False: no Linear biases (LayerNorm keeps its own).
  auto nobias = tiny({"model.bias=false"});
  for (const auto& [name, shape] : parameter_shapes(nobias.model))
    CHECK(name.find("c_fc.bias") == std::string::npos);
  CHECK(parameter_count(parameter_shapes(nobias.model)) <
        parameter_count(parameter_shapes(tiny().model)));
  // The meta build lists what the real module holds, in order.
  auto small = tiny();
  auto shapes = parameter_shapes(small.model);
  auto real = build_model(small.model);
  auto params = real.module->named_parameters();
  REQUIRE(shapes.size() == params.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    CHECK(shapes[i].first == params[i].key());
    CHECK(shapes[i].second == params[i].value().sizes().vec());
  }
}

TEST_CASE("dry-run memory splits Shard(d) params over the mesh, torch.chunk style", "[trainer]") {
  auto c = tiny();
  const int64_t n = parameter_count(parameter_shapes(c.model));
  // No plan: every rank holds everything; 4 bytes param, 4 grad, 8 AdamW.
  auto m = memory_per_rank(c, vescale::mesh::MeshShape({{"dp", 2}}, 2));
  CHECK(m.parameters == n);
  CHECK(m.param_bytes == 4.0 * n);
  CHECK(m.grad_bytes == 4.0 * n);
  CHECK(m.optimizer_bytes == 8.0 * n);
  // wte [256, 64] Shard(0) over tp=3: the first ranks hold ceil(256 / 3) = 86 rows; ZeRO-1 over
  // dp=2 keeps half the moments and half an fp32 parameter copy of everything replicated on dp.
  const std::string plan = "/tmp/vescale_test_plan." + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(plan);
    f << R"J({"mesh": ["dp", "tp"], "params": {"wte.weight": ["Replicate", "Shard(0)"], "*": ["Replicate", "Replicate"]}})J";
  }
  auto sharded =
      tiny({"parallel.plan=" + plan, "parallel.zero=1", "parallel.mesh={\"dp\":2,\"tp\":3}"});
  m = memory_per_rank(sharded, vescale::mesh::MeshShape({{"dp", 2}, {"tp", 3}}, 6));
  const double local = static_cast<double>(n - 256 * 64 + 86 * 64);
  CHECK(m.param_bytes == 4 * local);
  CHECK(m.grad_bytes == 4 * local);
  CHECK(m.optimizer_bytes == (8 + 4) * local / 2);
  auto report = dry_run_report(sharded, vescale::mesh::MeshShape({{"dp", 2}, {"tp", 3}}, 6));
  CHECK_THAT(report, Contains("mesh: dp=2, tp=3 (6 ranks)"));
  CHECK_THAT(report, Contains("plan: " + plan + "; zero 1"));
  std::remove(plan.c_str());
}

TEST_CASE(
    "dry-run under a pipeline: each pp rank holds its stages, and the schedule's in-flight "
    "micro-batches of activations",
    "[trainer]") {
  // LLaMA, 4 blocks + embedding + head = 6 layers over pp=2: [tok_embeddings, layers.0..1],
  // [layers.2..3, output]. 1F1B at 4 micro-batches: rank 0 holds 2 in flight, rank 1 one.
  auto c = Config::from_file(VESCALE_SOURCE_DIR "/configs/llama_tiny.json",
                             {"parallel.plan=\"plans/llama_pp.json\"", "parallel.mesh={\"pp\":2}",
                              "train.batch_size=2", "train.seq_len=16", "log.metrics_jsonl=\"\""});
  const auto shapes = parameter_shapes(c.model);
  double n0 = 0, n1 = 0;  // elements each rank holds
  for (const auto& [name, shape] : shapes) {
    double k = 1;
    for (auto d : shape) k *= static_cast<double>(d);
    const bool first = name.rfind("tok_embeddings", 0) == 0 || name.rfind("layers.0.", 0) == 0 ||
                       name.rfind("layers.1.", 0) == 0;
    (first ? n0 : n1) += k;
  }
  const auto m = memory_per_rank(c, vescale::mesh::MeshShape({{"pp", 2}}, 2));
  REQUIRE(m.stages.size() == 2);
  CHECK(m.stages[0].layers == "tok_embeddings .. layers.1");
  CHECK(m.stages[1].layers == "layers.2 .. output");
  CHECK(m.stages[0].param_bytes == 4 * n0);
  CHECK(m.stages[1].param_bytes == 4 * n1);
  CHECK(m.stages[0].optimizer_bytes == 8 * n0);
  CHECK(m.stages[0].in_flight == 2);
  CHECK(m.stages[1].in_flight == 1);
  // fp32, per token of a block (s b = 16 x 2): LLaMA's count (models/llama/transformer.cpp),
  // 6 x 128 around the norms, 4 x 128 in attention, 4 x 384 in the feed-forward; a GPU's flash
  // attention keeps no probabilities. The last stage adds the fp32 logits and their gradient,
  // 8 s b vocab.
  const double sb = 16.0 * 2, block = sb * (6 * 128 + 4 * 128 + 4 * 384) * 4;
  CHECK(m.stages[0].activation_bytes == 2 * 2 * block);
  CHECK(m.stages[1].activation_bytes == 1 * 2 * block + 8 * 16 * 2 * 256);
  // Checkpointed: each block keeps its input (s b h in fp32), one block is recomputed.
  CHECK(m.stages[0].activation_bytes_checkpointed == 2 * 2 * sb * 128 * 4 + block);
}

TEST_CASE("FLOPs per token: 6 x matmul parameters + attention", "[trainer]") {
  auto c = tiny();
  // Hand count for GPT (C = 64, L = 2, V = 256, T = 32): per layer 12 C^2 matmul weights; the
  // tied head V x C; position embeddings don't multiply.
  const double C = 64, L = 2, V = 256, T = 32;
  CHECK(flops_per_token(c.model, 32) == Approx(6 * (L * 12 * C * C + V * C) + 12 * L * C * T));
  // docs/train.md's worked example, llama_tiny at T = 128: per layer wq, wo 128 x 128, wk, wv
  // 64 x 128, w1, w2, w3 384 x 128 = 196608; 4 layers + the untied head 256 x 128 = 819200
  // weights; 6 x 819200 + 12 x 4 x 128 x 128 = 5701632.
  const auto llama =
      Config::from_file(std::string(VESCALE_SOURCE_DIR) + "/configs/llama_tiny.json");
  CHECK(flops_per_token(llama.model, 128) == 5701632.0);
}

TEST_CASE("activation checkpointing gives the same grads, dropout included", "[trainer]") {
  vescale::models::GPTOptions o{
      .vocab_size = 64, .n_positions = 16, .n_embd = 32, .n_layer = 3, .n_head = 4, .dropout = 0.2};
  torch::manual_seed(3);
  vescale::models::GPT plain(o), ckpt(o);
  {
    c10::NoGradGuard g;
    for (size_t i = 0; i < plain->parameters().size(); ++i)
      ckpt->parameters()[i].copy_(plain->parameters()[i]);
  }
  auto tokens = at::randint(64, {2, 16}, at::kLong);
  auto targets = at::randint(64, {2, 16}, at::kLong);
  auto loss = [&](vescale::models::GPT& m) {
    return at::cross_entropy_loss(m->forward(tokens).reshape({-1, 64}), targets.reshape({-1}));
  };
  torch::manual_seed(11);
  auto l0 = loss(plain);
  l0.backward();
  auto checkpointed = vescale::parallel::enable_activation_checkpointing(*ckpt, "h.*");
  CHECK(checkpointed.size() == 3);
  torch::manual_seed(11);
  auto l1 = loss(ckpt);
  l1.backward();
  checkpointed.clear();
  CHECK(l0.item<double>() == l1.item<double>());
  auto g0 = grads_of(*plain), g1 = grads_of(*ckpt);
  for (auto& [name, g] : g0) {
    INFO(name);
    CHECK(at::allclose(g, g1[name], 1e-6, 1e-7));
  }
  // Without restoring the RNG, the recomputed dropout would differ: the replay is what makes
  // this pass, so check dropout really is active (two forwards differ).
  torch::manual_seed(11);
  auto a = plain->forward(tokens);
  auto b = plain->forward(tokens);
  CHECK_FALSE(at::allclose(a, b));
  CHECK_THROWS_WITH((void)vescale::parallel::enable_activation_checkpointing(*plain, "blocks.*"),
                    Contains("no module matches 'blocks.*'"));
}

namespace {
// A block whose dropout draws from vescale::random (as DTensor dropout does).
struct VescaleDropoutBlock : torch::nn::Module {
  VescaleDropoutBlock() { w = register_parameter("w", at::randn({8, 8})); }
  at::Tensor forward(const at::Tensor& x) {
    return vescale::random::dropout(at::tanh(at::matmul(x, w)), 0.5);
  }
  at::Tensor w;
};
}  // namespace

TEST_CASE("checkpoint replays vescale::random's stream in backward", "[trainer]") {
  auto block = std::make_shared<VescaleDropoutBlock>();
  auto x = at::randn({4, 8}).requires_grad_();
  vescale::random::manual_seed(5);
  auto y0 = block->forward(x);
  y0.sum().backward();
  auto gw0 = block->w.grad().clone(), gx0 = x.grad().clone();
  block->w.mutable_grad() = at::Tensor();
  x.mutable_grad() = at::Tensor();
  vescale::random::manual_seed(5);
  auto y1 =
      vescale::parallel::checkpoint({x}, [&](const std::vector<at::Tensor>& xs) { return block->forward(xs[0]); });
  const auto after_forward = vescale::random::get_state();
  y1.sum().backward();
  CHECK(at::equal(y0, y1));
  CHECK(at::allclose(block->w.grad(), gw0));
  CHECK(at::allclose(x.grad(), gx0));
  // The recompute consumed nothing from the stream the rest of training sees.
  CHECK(vescale::random::get_state().offset == after_forward.offset);
}

TEST_CASE("NaN or inf stops training with the step named", "[trainer]") {
  {
    Trainer t(tiny());
    {
      c10::NoGradGuard g;
      t.model().module->named_parameters()["ln_f.weight"].fill_(
          std::numeric_limits<float>::quiet_NaN());
    }
    CHECK_THROWS_WITH(t.run(), Contains("step 1: the loss is nan; stopping before the update"));
  }
  {
    Trainer t(tiny());
    t.step(0);
    // A finite loss whose gradient blows up at step 2.
    auto w = t.model().module->named_parameters()["h.0.mlp.c_fc.weight"];
    w.register_hook([](const at::Tensor& g) { return g * std::numeric_limits<float>::infinity(); });
    CHECK_THROWS_WITH(t.step(1), Contains("step 2: the gradient norm is inf"));
  }
}

TEST_CASE("a libtorch error in a step becomes one line naming the step and the phase",
          "[trainer]") {
  Trainer t(tiny());
  auto w = t.model().module->named_parameters()["h.0.mlp.c_fc.weight"];
  w.register_hook([](const at::Tensor& g) -> at::Tensor {
    TORCH_CHECK(false, "a kernel failed");
    return g;
  });
  try {
    t.run();
    FAIL("run() did not throw");
  } catch (const vescale::Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("step 1: backward: a kernel failed"));
    CHECK_THAT(msg, !Contains("Exception raised from"));  // libtorch's stack is left out
  }
}

TEST_CASE("divergence guard: NaN/inf always, spikes over the median after warmup, ln(vocab) always",
          "[trainer][guard]") {
  using vescale::train::DivergenceGuard;
  // ln(256) = 5.545: the uniform bound is 3 x 5.545 = 16.64.
  DivergenceGuard g(
      {.max_loss_spike = 3, .warmup_steps = 2, .vocab_size = 256, .lr = 1e-3, .grad_clip = 1});
  g.check(1, 5.0, 1.0);
  g.check(2, 16.0, 1.0);  // in warmup: only the uniform bound applies (16 < 16.64)
  CHECK_THROWS_WITH(g.check(3, 17.0, 1.0),
                    Contains("step 3: the loss 17 is above train.max_loss_spike x "
                             "ln(vocab_size) = 3 x 5.545"));
  CHECK(g.median() == 10.5);  // of {5, 16}: the failed step is not remembered
  g.check(3, 4.0, 1.0);
  CHECK(g.median() == 5.0);  // {5, 16, 4}
  CHECK_THROWS_WITH(g.check(4, 15.5, 1.0),
                    Contains("step 4: the loss 15.5 is above train.max_loss_spike x the "
                             "median of the last 3 steps = 3 x 5"));
  g.check(4, 14.9, 1.0);  // below 3 x 5
  CHECK_THROWS_WITH(g.check(5, std::nan(""), 1.0),
                    Contains("step 5: the loss is nan; stopping before the update"));
  CHECK_THROWS_WITH(g.check(5, 4.0, INFINITY),
                    Contains("step 5: the gradient norm is inf (loss 4)"));
  // The knobs: grad_clip only when clipping is off.
  CHECK_THROWS_WITH(g.check(5, 4.0, INFINITY), !Contains("grad_clip"));
  DivergenceGuard off_clip(
      {.max_loss_spike = 0, .warmup_steps = 0, .vocab_size = 256, .lr = 1e-3, .grad_clip = 0});
  CHECK_THROWS_WITH(off_clip.check(1, 4.0, INFINITY),
                    Contains("or set train.grad_clip (now 0: clipping is off)"));
  off_clip.check(1, 1e6, 1.0);  // max_loss_spike 0: only NaN/inf stop
  // The window is the last 20 steps.
  DivergenceGuard w({.max_loss_spike = 3, .warmup_steps = 0, .vocab_size = 0});
  for (int i = 1; i <= 25; ++i) w.check(i, i <= 5 ? 100.0 : 1.0, 1.0);
  CHECK(w.median() == 1.0);
  CHECK_THROWS(w.check(26, 3.5, 1.0));
}

TEST_CASE(
    "divergence guard: a collapsed model (zero gradient, loss pinned at ln(vocab)) and an "
    "exploding update fail",
    "[trainer][guard]") {
  using vescale::train::DivergenceGuard;
  const double uniform = std::log(256.0);  // 5.545
  DivergenceGuard g(
      {.max_loss_spike = 3, .warmup_steps = 0, .vocab_size = 256, .lr = 1e6, .grad_clip = 1});
  // Step 1 at the initial weights (norm 185): nothing to compare with yet.
  g.check({.step = 1, .loss = 6.45, .grad_norm = 1.96, .prev_lr = 0, .param_norm = 185});
  // The update grew the weights 244000-fold: caught at the next step, whatever its loss.
  CHECK_THROWS_WITH(
      g.check({.step = 2, .loss = 5.0, .grad_norm = 1.0, .prev_lr = 5e4, .param_norm = 4.5e7}),
      Contains("step 2: the parameters' norm grew from 185 to 4.5e+07 (x2.432e+05) "
               "in the last update: it exploded; stopping before the update"));
  // Up to 10x is growth, not an explosion (a failed step is not remembered: 185 is the reference).
  g.check({.step = 2, .loss = 6.3, .grad_norm = 1.0, .prev_lr = 5e4, .param_norm = 1850});
  // A gradient of exactly zero with a positive loss: nothing can learn any more.
  CHECK_THROWS_WITH(g.check({.step = 3, .loss = uniform, .grad_norm = 0, .prev_lr = 1e-3}),
                    Contains("step 3: the gradient is exactly zero while the loss is 5.545 = "
                             "ln(vocab_size), the loss of uniform outputs: the model collapsed"));
  CHECK_THROWS_WITH(
      g.check({.step = 3, .loss = 4.0, .grad_norm = 0, .prev_lr = 1e-3}),
      Contains("the gradient is exactly zero while the loss is 4: the model collapsed"));
  // The loss at ln(vocab) once (an untrained head gives it) passes; twice in a row across an
  // update it is pinned there.
  g.check({.step = 3, .loss = uniform, .grad_norm = 0.5, .prev_lr = 1e-3});
  CHECK_THROWS_WITH(
      g.check({.step = 4, .loss = uniform * (1 + 1e-7), .grad_norm = 0.5, .prev_lr = 1e-3}),
      Contains("step 4: the loss is pinned at ln(vocab_size) = 5.545 (uniform "
               "outputs) for two steps in a row: the model collapsed"));
  // ... unless no update happened between them (lr 0), or the loss moved off it.
  g.check({.step = 4, .loss = uniform, .grad_norm = 0.5, .prev_lr = 0});
  g.check({.step = 5, .loss = uniform + 1e-3, .grad_norm = 0.5, .prev_lr = 1e-3});
  // max_loss_spike 0 turns the heuristics off: only NaN and inf stop.
  DivergenceGuard off({.max_loss_spike = 0, .warmup_steps = 0, .vocab_size = 256});
  off.check({.step = 1, .loss = 6, .grad_norm = 1, .prev_lr = 0, .param_norm = 1});
  off.check({.step = 2, .loss = uniform, .grad_norm = 0, .prev_lr = 1, .param_norm = 1e9});
  CHECK_THROWS(off.check({.step = 3, .loss = uniform, .grad_norm = NAN, .prev_lr = 1}));
}

TEST_CASE(
    "the memory check refuses a model larger than a rank's memory, naming the figures and the "
    "fixes",
    "[trainer]") {
  Config c = tiny({});
  const vescale::mesh::MeshShape one({{"dp", 1}}, 1);
  const double need = vescale::train::memory_per_rank(c, one).total();
  REQUIRE(need > 0);
  vescale::train::check_fits(c, one, need * 1.01, "its test budget");  // fits
  CHECK_THROWS_WITH(
      vescale::train::check_fits(c, one, need / 2, "its test budget"),
      Contains("does not fit: each rank needs about ") &&
          Contains("the --dry-run estimate) but has ") && Contains("its test budget") &&
          Contains("ZeRO over the data ranks (parallel.zero=1, 2 or 3)") &&
          Contains("activation checkpointing (train.activation_checkpointing=true)") &&
          Contains("or set train.allow_oversubscribe=true"));
  c.train.allow_oversubscribe = true;
  vescale::train::check_fits(c, one, need / 2, "its test budget");
  vescale::train::check_fits(tiny({}), one, 0, "unknown");  // nothing known: no check
  // The host's share: the same memory split over more local ranks.
  std::string where;
  const double alone = vescale::train::rank_memory_bytes("cpu", 1, where);
  CHECK_THAT(where, Contains("the host's available memory"));
  CHECK(vescale::train::rank_memory_bytes("cpu", 4, where) == Approx(alone / 4).epsilon(0.05));
  CHECK_THAT(where, Contains("/ 4 local ranks"));
}

TEST_CASE("grad accumulation over micro-batches equals one big batch", "[trainer]") {
  // batch 4 x accum 2 takes the same 8 samples as batch 8 x accum 1 (the loader's order).
  Trainer big(tiny({"train.batch_size=8", "train.grad_accum=1"}));
  Trainer acc(tiny({"train.batch_size=4", "train.grad_accum=2"}));
  auto mb = big.step(0), ma = acc.step(0);
  CHECK(ma.loss == Approx(mb.loss).epsilon(1e-5));
  CHECK(ma.grad_norm == Approx(mb.grad_norm).epsilon(1e-4));
  auto pb = big.model().module->named_parameters(), pa = acc.model().module->named_parameters();
  for (auto& item : pb) {
    INFO(item.key());
    CHECK(at::allclose(item.value(), pa[item.key()], 1e-5, 1e-6));
  }
}

TEST_CASE("bf16 autocast keeps fp32 master weights and a close loss", "[trainer]") {
  Trainer fp32(tiny()), bf16(tiny({"train.dtype=bf16"}));
  auto a = fp32.step(0), b = bf16.step(0);
  CHECK(b.loss == Approx(a.loss).epsilon(0.02));
  CHECK(b.loss != a.loss);  // bf16 matmuls really ran
  for (auto& p : bf16.model().module->parameters()) CHECK(p.scalar_type() == at::kFloat);
}

TEST_CASE("loss falls on the built-in corpus, with checkpointing too", "[trainer]") {
  for (const char* ckpt : {"false", "true"}) {
    Trainer t(tiny({"train.steps=25", "train.activation_checkpointing=" + std::string(ckpt)}));
    auto m = t.run();
    INFO("checkpointing " << ckpt);
    CHECK(m.size() == 25);
    CHECK(m.back().loss < m.front().loss - 1.0);  // from ~5.5 (uniform over 256 bytes)
    REQUIRE(m.back().val_loss.has_value());
    CHECK(*m.back().val_loss < m.front().loss - 1.0);
  }
}

TEST_CASE(
    "Mixtral's aux loss under activation checkpointing: the same value, counted once, same grads",
    "[trainer]") {
  const auto cfg = tiny_mixtral();
  REQUIRE(cfg.model.as<vescale::models::MixtralOptions>().moe.aux_loss_coef > 0);
  torch::manual_seed(3);
  Model plain = build_model(cfg.model);
  torch::manual_seed(3);
  Model ckpt = build_model(cfg.model);
  const auto checkpointed =
      vescale::parallel::enable_activation_checkpointing(*ckpt.module, ckpt.block_pattern, ckpt.block_side_outputs);
  REQUIRE(checkpointed.size() == 2);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto tokens = at::randint(256, {4, 33}, gen, at::kLong);
  const auto x = tokens.slice(1, 0, 32), y = tokens.slice(1, 1, 33);
  struct Out {
    double ce, aux;
    std::map<std::string, at::Tensor> grads;
  };
  auto run = [&](Model& m, bool with_aux) {
    auto logits = m.forward(x);
    auto ce = at::cross_entropy_loss(logits.reshape({-1, 256}), y.reshape({-1}));
    auto aux = m.aux_loss();  // threw under checkpointing before: the logits had no graph
    (with_aux ? ce + aux : ce).backward();
    Out o{ce.item<double>(), aux.item<double>(), grads_of(*m.module)};
    m.module->zero_grad();
    return o;
  };
  const Out want = run(plain, true), got = run(ckpt, true);
  CHECK(got.ce == want.ce);
  CHECK(got.aux == want.aux);  // the forward's own value, once
  CHECK(want.aux >
        cfg.model.as<vescale::models::MixtralOptions>().moe.aux_loss_coef);  // coef x (~top_k when balanced)
  for (auto& [name, g] : want.grads) {
    INFO(name << ": max |diff| " << max_diff(got.grads.at(name), g));
    CHECK(max_diff(got.grads.at(name), g) <= 1e-6);
  }
  // The aux term's gradient really reaches the routers (and only through them and below).
  const Out ce_only = run(ckpt, false);
  const std::string router = "layers.1.feed_forward.router.weight";
  CHECK(max_diff(ce_only.grads.at(router), want.grads.at(router)) > 1e-6);
  CHECK(max_diff(ce_only.grads.at("output.weight"), want.grads.at("output.weight")) == 0);
}

TEST_CASE("expert loads count each training forward once, also under activation checkpointing",
          "[trainer]") {
  // The checkpoint reruns each block in backward; the rerun must not count its tokens again,
  // and evaluation counts none (the aux-loss-free bias moves on training loads only).
  const auto cfg = tiny_mixtral();
  const auto& o = cfg.model.as<vescale::models::MixtralOptions>();
  Model ckpt = build_model(cfg.model);
  const auto checkpointed =
      vescale::parallel::enable_activation_checkpointing(*ckpt.module, ckpt.block_pattern, ckpt.block_side_outputs);
  REQUIRE(checkpointed.size() == 2);
  const auto tokens = at::randint(256, {4, 17}, at::kLong);
  ckpt.module->train();
  ckpt.forward(tokens.slice(1, 0, 16)).sum().backward();
  ckpt.forward(tokens.slice(1, 0, 16)).sum().backward();
  auto loads = ckpt.moe.take_loads();
  REQUIRE(loads.size() == 2);
  for (const auto& l : loads) {
    REQUIRE(l.defined());
    CHECK(l.sum().item<double>() == 2.0 * 4 * 16 * o.moe.top_k);  // 2 forwards x 64 tokens x k
  }
  ckpt.module->eval();
  {
    torch::NoGradGuard no_grad;
    ckpt.forward(tokens.slice(1, 0, 16));
  }
  for (const auto& l : ckpt.moe.take_loads()) CHECK(!l.defined());  // reset, and eval not counted
}

TEST_CASE("the aux-loss-free expert bias moves once per step towards balance and is checkpointed",
          "[trainer]") {
  const auto dir = std::filesystem::temp_directory_path() / "vescale_expert_bias_ckpt";
  std::filesystem::remove_all(dir);
  auto cfg = tiny_mixtral({"model.expert_bias_rate=0.01", "checkpoint.dir=\"" + dir.string() + "\"",
                           "checkpoint.every=2"});
  Trainer t(cfg);
  auto m = t.step(0);
  REQUIRE(m.expert_loads.size() == 2);
  // bias_e = rate * sign(mean - load_e) after one step, from the loads the step reported.
  auto* impl = dynamic_cast<vescale::models::MixtralImpl*>(t.model().module.get());
  REQUIRE(impl != nullptr);
  for (size_t i = 0; i < 2; ++i) {
    const auto& load = m.expert_loads[i];
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / load.size();
    auto bias = vescale::models::moe_of(*impl->layers->ptr(i)).expert_bias;
    for (size_t e = 0; e < load.size(); ++e) {
      const double want = load[e] < mean ? 0.01 : load[e] > mean ? -0.01 : 0.0;
      CHECK(bias[static_cast<int64_t>(e)].item<double>() == Approx(want).margin(1e-9));
    }
  }
  t.step(1);
  t.save_checkpoint(2);
  t.finish_checkpoint();
  const auto saved =
      vescale::models::moe_of(*impl->layers->ptr(1)).expert_bias.clone();
  CHECK(saved.abs().sum().item<double>() > 0);
  // A resumed trainer starts from the saved bias, not zeros.
  auto cfg2 = cfg;
  cfg2.checkpoint.resume = true;
  Trainer r(cfg2);
  auto* impl2 = dynamic_cast<vescale::models::MixtralImpl*>(r.model().module.get());
  CHECK(
      at::equal(vescale::models::moe_of(*impl2->layers->ptr(1)).expert_bias, saved));
  std::filesystem::remove_all(dir);
}

TEST_CASE("Mixtral with its aux loss trains the same with and without activation checkpointing",
          "[trainer]") {
  Trainer a(tiny_mixtral());
  Trainer b(tiny_mixtral({"train.activation_checkpointing=true"}));
  for (int64_t s = 0; s < 4; ++s) {
    auto ma = a.step(s), mb = b.step(s);
    INFO("step " << s);
    CHECK(std::abs(mb.loss - ma.loss) <= 1e-6);
    CHECK(std::abs(mb.grad_norm - ma.grad_norm) <= 1e-6 * ma.grad_norm);
  }
  auto pb = b.model().module->named_parameters();
  for (auto& item : a.model().module->named_parameters()) {
    INFO(item.key());
    CHECK(max_diff(pb[item.key()], item.value()) <= 1e-6);
  }
}

TEST_CASE("a 1-device mesh trains on plain tensors, initialised like the DTensors", "[trainer]") {
  const bool owns_world = !vescale::dist::is_initialized();
  if (owns_world) vescale::dist::init();
  {
    auto mesh = vescale::mesh::DeviceMesh::init({{"dp", 1}});
    const auto cfg = tiny();
    // The reference: the same model parallelized into (trivial) DTensors, its init through
    // vescale::random, seeded as the trainer seeds.
    torch::manual_seed(cfg.train.seed);
    vescale::random::manual_seed(cfg.train.seed);
    Model ref = build_model(cfg.model);
    vescale::plan::Plan replicated({"dp"});
    replicated.shard("*", {vescale::dtensor::Replicate()});
    vescale::plan::parallelize(*ref.module, replicated, mesh, {.init = ref.init});
    auto want = ref.module->named_parameters();

    Trainer t(cfg, mesh);
    for (auto& item : t.model().module->named_parameters()) {
      INFO(item.key());
      CHECK(!vescale::dtensor::is_dtensor(item.value()));
      CHECK(at::equal(item.value(), vescale::dtensor::full_tensor(want[item.key()].detach())));
    }
    CHECK(t.grad_reducer() == nullptr);
    const auto m0 = t.step(0);
    t.step(1);
    const auto m2 = t.step(2);
    CHECK(m2.loss < m0.loss);
    for (auto& item : t.model().module->named_parameters())
      CHECK(!vescale::dtensor::is_dtensor(item.value()));
  }
  if (owns_world) vescale::dist::shutdown();
}

TEST_CASE("a run resumed from its checkpoint continues bitwise", "[trainer][checkpoint]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("vescale_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  // Dropout on: the resumed run must also continue libtorch's random stream.
  const std::vector<std::string> common{"train.steps=6", "model.dropout=0.1", "train.grad_accum=2"};
  auto with_ckpt = common;
  with_ckpt.insert(
      with_ckpt.end(),
      {"checkpoint.dir=\"" + dir.string() + "\"", "checkpoint.every=3", "checkpoint.keep=1",
       "log.metrics_jsonl=\"" + (dir / "metrics.jsonl").string() + "\""});

  Trainer ref(tiny(common));
  const auto want = ref.run();
  REQUIRE(want.size() == 6);
  std::string first_run_id;
  {
    // Three steps, the checkpoint run() writes after step 3, then the process "dies".
    Trainer first(tiny(with_ckpt));
    CHECK(first.resumed_step() == 0);
    first_run_id = first.run_id();
    CHECK_FALSE(first_run_id.empty());
    for (int64_t s = 0; s < 3; ++s) first.step(s);
    first.save_checkpoint(3);
    first.finish_checkpoint();
  }
  Trainer resumed(tiny(with_ckpt));
  CHECK(resumed.resumed_step() == 3);
  const auto got = resumed.run();
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << got[i].step);
    CHECK(got[i].step == want[3 + i].step);
    CHECK(got[i].loss == want[3 + i].loss);
    CHECK(got[i].grad_norm == want[3 + i].grad_norm);
  }
  auto ref_params = ref.model().module->named_parameters();
  for (auto& item : resumed.model().module->named_parameters()) {
    INFO(item.key());
    CHECK(at::equal(item.value(), ref_params[item.key()]));
  }
  // run() saved at step 6; keep=1 dropped step 3; the metrics log has steps 4-6 once each.
  CHECK(std::filesystem::exists(dir / "step-00000006" / "index.json"));
  CHECK_FALSE(std::filesystem::exists(dir / "step-00000003"));
  // The index records the config that trained it.
  const auto meta = nlohmann::json::parse(
      vescale::checkpoint::read_info((dir / "step-00000006").string()).metadata);
  CHECK(meta.at("config").at("train").at("steps") == 6);
  CHECK(meta.at("config").at("model").at("type") == "gpt");
  std::ifstream metrics(dir / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  CHECK(lines == 3);
  // Nothing left to do at step 6.
  Trainer done(tiny(with_ckpt));
  CHECK(done.resumed_step() == 6);
  CHECK(done.run().empty());
  // checkpoint.resume=false on a used folder is an error; with overwrite it starts over.
  auto fresh = with_ckpt;
  fresh.push_back("checkpoint.resume=false");
  CHECK_THROWS_WITH(Trainer(tiny(fresh)),
                    Contains("already holds checkpoints") && Contains("checkpoint.overwrite"));
  fresh.push_back("checkpoint.overwrite=true");
  Trainer over(tiny(fresh));
  CHECK(over.resumed_step() == 0);
  CHECK(over.run_id() != resumed.run_id());
  CHECK(resumed.run_id() == first_run_id);  // a resumed run goes on under its checkpoint's id
  CHECK_THROWS_WITH(tiny({"checkpoint.keep=-1"}), Contains("checkpoint.keep"));
  std::filesystem::remove_all(dir);
}
