// parallelize(): a model written for one device, trained under each shipped plan, must match
// the same model trained on one device: init bitwise, 20 AdamW steps of losses and the final
// parameters within 1e-5 relative (fp32).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "vescale/models/gpt/gpt.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/models/qwen3/qwen3.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/parallel/grad_reduce.h"
#include "common/train_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"
#include "vescale/parallel/activation_checkpoint.h"

using namespace vescale;

using namespace vescale::testing;

namespace {

constexpr int64_t kBatch = 4, kSeq = 16, kSteps = 20;
// AdamW's eps above fp32 rounding noise of the gradients (see check_close).
constexpr double kLr = 2e-3, kEps = 1e-6;

vescale::models::GPTOptions tiny_gpt(double dropout = 0.0) {
  vescale::models::GPTOptions o;
  o.vocab_size = 64;
  o.n_positions = kSeq;
  o.n_embd = 32;
  o.n_head = 4;
  o.n_layer = 2;
  o.dropout = dropout;
  // No Linear biases: the key bias has an exactly-zero gradient (softmax is shift-invariant),
  // and AdamW would turn its rounding noise into lr-sized steps that differ run to run.
  o.bias = false;
  return o;
}

// The same tokens on every rank: [B, T+1], inputs and next-token targets.
at::Tensor batch(int64_t step, int64_t vocab) {
  return counting_tokens(1000 + step, kBatch, kSeq, vocab);
}

// With llama3 rope scaling, so the plans also carry the scaled rope tables.
vescale::models::LlamaOptions scaled_tiny_llama() {
  auto o = tiny_llama(kSeq);
  o.rope_scaling.factor = 8.0;
  o.rope_scaling.original_max_position_embeddings = 8;
  return o;
}

vescale::models::MixtralOptions tiny_mixtral() {
  vescale::models::MixtralOptions o;
  o.llama.vocab_size = 64;
  o.llama.dim = 64;
  o.llama.n_layers = 2;
  o.llama.n_heads = 8;
  o.llama.n_kv_heads = 4;
  o.llama.ffn_dim = 48;
  o.moe.n_experts = 4;
  o.moe.top_k = 2;
  o.llama.max_seq_len = kSeq;
  return o;
}

// A Qwen3 whose heads are wider than dim / n_heads (as Qwen3-30B-A3B's).
vescale::models::Qwen3Options tiny_qwen3() {
  vescale::models::Qwen3Options o;
  o.llama = {.vocab_size = 64, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 4,
             .ffn_dim = 48, .norm_eps = 1e-6, .rope_theta = 10000.0, .max_seq_len = kSeq};
  o.head_dim = 12;
  return o;
}

int64_t vocab_of(const vescale::models::GPTOptions& o) { return o.vocab_size; }
int64_t vocab_of(const vescale::models::LlamaOptions& o) { return o.vocab_size; }
int64_t vocab_of(const vescale::models::MixtralOptions& o) { return o.llama.vocab_size; }
int64_t vocab_of(const vescale::models::Qwen3Options& o) { return o.llama.vocab_size; }

struct Trained {
  std::map<std::string, at::Tensor> init;  // full values, before the first step
  std::vector<double> losses;
  std::map<std::string, at::Tensor> final;  // full values, after the last step
};

struct RunOptions {
  bool static_eager = false;
  int64_t short_step = -1;  // this step uses half the sequence (a shape change)
  bool plain = false;       // ParallelizeOptions::plain_on_one_device
};

template <class Model, class Options>
Trained train_planned(const Options& o, const plan::Plan& plan, const mesh::DeviceMesh& mesh,
                      RunOptions run = {}) {
  random::manual_seed(1234);
  Model model(o);
  // parallel::parallelize: plan::parallelize, and the experts' boundary for Mixtral.
  parallel::parallelize(*model, plan, mesh,
                        {.init = [&] { model->init_weights(); }, .plain_on_one_device = run.plain});
  if (run.plain)
    for (auto& p : model->named_parameters()) {
      INFO(p.key());
      CHECK(!dtensor::is_dtensor(p.value()));
    }
  Trained r;
  r.init = full_params(*model);
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(kLr).eps(kEps).weight_decay(0.1));
  dtensor::set_static_eager(run.static_eager);
  for (int64_t s = 0; s < kSteps; ++s) {
    dtensor::static_eager_step();
    auto full = batch(s, vocab_of(o));
    const int64_t T = s == run.short_step ? kSeq / 2 : kSeq;
    auto x = full.slice(1, 0, T).contiguous(), y = full.slice(1, 1, T + 1).contiguous();
    if (!run.plain) x = model_input(x, mesh), y = model_input(y, mesh);
    opt.zero_grad();
    at::Tensor loss = lm_loss(vescale::nn::call(model, x), y);
    loss.backward();
    parallel::reduce_gradients(*model);
    opt.step();
    if (run.plain) {
      CHECK(!dtensor::is_dtensor(loss));  // no forward hook made DTensors either
      r.losses.push_back(loss.item<double>());
    } else {
      r.losses.push_back(dtensor::full_tensor(loss.detach()).item<double>());
    }
  }
  dtensor::set_static_eager(false);
  r.final = full_params(*model);
  plan::remove_forward_hooks(*model);
  return r;
}

// The single-device reference: plain tensors, libtorch alone, from the given initial values.
template <class Model, class Options>
Trained train_plain(const Options& o, const std::map<std::string, at::Tensor>& init) {
  Model model(o);
  {
    torch::NoGradGuard g;
    for (auto& p : model->named_parameters()) p.value().copy_(init.at(p.key()));
  }
  Trained r;
  r.init = init;
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(kLr).eps(kEps).weight_decay(0.1));
  for (int64_t s = 0; s < kSteps; ++s) {
    auto full = batch(s, vocab_of(o));
    opt.zero_grad();
    at::Tensor loss = lm_loss(model->forward(full.slice(1, 0, kSeq)), full.slice(1, 1, kSeq + 1));
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
  }
  r.final = full_params(*model);
  return r;
}

void check_close(const Trained& got, const Trained& want, double rtol, const std::string& label) {
  REQUIRE(got.losses.size() == want.losses.size());
  double worst_loss = 0, worst_param = 0, worst_rel = 0;
  for (size_t i = 0; i < got.losses.size(); ++i)
    worst_loss =
        std::max(worst_loss, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
  for (auto& [name, w] : want.final) {
    worst_param = std::max(worst_param, (got.final.at(name) - w).abs().max().item<double>());
    worst_rel = std::max(worst_rel,
                         (got.final.at(name) - w).norm().item<double>() / w.norm().item<double>());
  }
  if (dist::rank() == 0)
    std::printf(
        "%s (world %d): loss %.4f -> %.4f, max loss rel diff %.2e, params: max rel err %.2e, max "
        "abs diff %.2e\n",
        label.c_str(), dist::world_size(), want.losses.front(), want.losses.back(), worst_loss,
        worst_rel, worst_param);
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i << ": " << got.losses[i] << " vs " << want.losses[i]);
    CHECK(std::abs(got.losses[i] - want.losses[i]) <= rtol * std::abs(want.losses[i]));
  }
  CHECK(want.losses.back() < want.losses.front() * 0.9);  // it trained
  // Parameters: relative (Frobenius) error per tensor. Elementwise, AdamW divides by sqrt(v):
  // where a gradient is tiny its rounding noise becomes a step of up to lr, so single elements
  // may differ more than the tensor does.
  for (auto& [name, w] : want.final) {
    const at::Tensor& g = got.final.at(name);
    const double err = (g - w).norm().item<double>() / std::max(w.norm().item<double>(), 1e-12);
    INFO(name << ": relative error " << err << ", max abs diff "
              << (g - w).abs().max().item<double>());
    CHECK(err <= rtol);
  }
}

struct Case {
  const char* plan;
  mesh::MeshDims dims;
};

// Every plan for one model family on this world size: TP and TP+SP over all ranks, and dp x tp.
std::vector<Case> cases_for(const std::string& family, int world) {
  std::vector<Case> cases = {{"_tp.json", {{"tp", world}}}};
  if (family == "llama" || family == "gpt2") cases.push_back({"_tp_sp.json", {{"tp", world}}});
  if (family != "mixtral" && world > 1)
    cases.push_back({"_dp_tp.json", {{"dp", 2}, {"tp", world / 2}}});
  return cases;
}

template <class Model, class Options>
void check_plans(const std::string& family, const Options& o) {
  const int world = dist::world_size();
  for (const auto& c : cases_for(family, world)) {
    const std::string file = "configs/plans/" + family + c.plan;
    SECTION(file) {
      auto mesh = mesh::DeviceMesh::init(c.dims);
      auto plan = plan::Plan::from_json_file(repo_file(file));
      // Single-device semantics: everything replicated computes the full tensors locally.
      Trained ref_init = train_planned<Model>(o, replicate_all(plan.mesh_dims()), mesh);
      Trained got = train_planned<Model>(o, plan, mesh);
      for (auto& [name, t] : ref_init.init) {
        INFO(name);
        CHECK(at::equal(got.init.at(name), t));  // init through the plan: bitwise
      }
      check_close(got, train_plain<Model>(o, ref_init.init), 1e-5, file);
    }
  }
}

}  // namespace

TEST_CASE("GPT under each shipped plan trains like one device", "[plan][world2][world4]") {
  check_plans<vescale::models::GPT>("gpt2", tiny_gpt());
}

TEST_CASE("LLaMA under each shipped plan trains like one device", "[plan][world2][world4]") {
  check_plans<vescale::models::Llama>("llama", scaled_tiny_llama());
}

TEST_CASE("Mixtral under its TP plan trains like one device", "[plan][world2][world4]") {
  check_plans<vescale::models::Mixtral>("mixtral", tiny_mixtral());
}

TEST_CASE("Qwen3 under each shipped plan trains like one device: per-head q/k norms on the "
          "heads each rank holds",
          "[plan][world2][world4]") {
  check_plans<vescale::models::Qwen3>("qwen3", tiny_qwen3());
}

TEST_CASE("dropout under TP+SP equals the replicated run bitwise in forward",
          "[plan][world2][world4]") {
  const int world = dist::world_size();
  auto o = tiny_gpt(/*dropout=*/0.1);
  auto mesh = mesh::DeviceMesh::init({{"tp", world}});
  auto plan = plan::Plan::from_json_file(repo_file("configs/plans/gpt2_tp_sp.json"));
  Trained ref = train_planned<vescale::models::GPT>(o, replicate_all({"tp"}), mesh);
  Trained got = train_planned<vescale::models::GPT>(o, plan, mesh);
  // Same masks everywhere, so the runs differ only by float reduction order.
  check_close(got, ref, 1e-5, "gpt2_tp_sp dropout 0.1 vs replicated");
}

TEST_CASE("parallelize on a 1-rank mesh is single-device training", "[plan][world1]") {
  REQUIRE(dist::world_size() == 1);
  const auto o = tiny_gpt();
  auto mesh = mesh::DeviceMesh::init({{"tp", 1}});
  auto plan = plan::Plan::from_json_file(repo_file("configs/plans/gpt2_tp.json"));
  Trained got = train_planned<vescale::models::GPT>(o, plan, mesh);
  // Plain tensors take vescale::kernels::gelu_tanh's fused backward, DTensors ATen's gelu_backward:
  // rounding only, ~1.2e-6 relative in the parameters after the AdamW steps.
  check_close(got, train_plain<vescale::models::GPT>(o, got.init), 1e-5, "gpt2_tp on a 1-rank mesh");
}

TEST_CASE("plain_on_one_device: plain tensors with the DTensor init bitwise, trained the same",
          "[plan][world1]") {
  REQUIRE(dist::world_size() == 1);
  const auto o = tiny_gpt();
  auto mesh = mesh::DeviceMesh::init({{"tp", 1}});
  auto plan = plan::Plan::from_json_file(
      repo_file("configs/plans/gpt2_tp_sp.json"));  // with forward entries
  Trained dt = train_planned<vescale::models::GPT>(o, plan, mesh);
  Trained plain = train_planned<vescale::models::GPT>(o, plan, mesh, {.plain = true});
  for (auto& [name, t] : dt.init) {
    INFO(name);
    CHECK(at::equal(plain.init.at(name), t));
  }
  // DTensor attention takes the math path, plain tensors CPU flash attention: rounding only.
  check_close(plain, dt, 1e-5, "gpt2_tp_sp, plain on a 1-device mesh vs DTensors");
}

namespace {
struct DropNetImpl : torch::nn::Module {
  DropNetImpl() {
    w = register_parameter("w", at::ones({8, 6}));
    drop = register_module("drop", torch::nn::Dropout(0.3));
  }
  at::Tensor forward(const at::Tensor& x) { return vescale::nn::call(drop, at::matmul(x, w)); }
  at::Tensor w;
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(DropNet);
}  // namespace

TEST_CASE("plain_on_one_device: nn::Dropout draws the DTensor masks from vescale::random",
          "[plan][world1]") {
  REQUIRE(dist::world_size() == 1);
  auto mesh = mesh::DeviceMesh::init({{"x", 1}});
  DropNet dt, plain;
  plan::parallelize(*dt, replicate_all({"x"}), mesh);
  plan::parallelize(*plain, replicate_all({"x"}), mesh, {.init = {}, .plain_on_one_device = true});
  REQUIRE(dtensor::is_dtensor(dt->w));
  REQUIRE(!dtensor::is_dtensor(plain->w));
  const auto x = at::arange(40, at::kFloat).view({5, 8}) / 40;
  random::manual_seed(7);
  const at::Tensor want = dtensor::full_tensor(vescale::nn::call(dt, x));
  random::manual_seed(7);
  const at::Tensor got = vescale::nn::call(plain, x);
  CHECK(!dtensor::is_dtensor(got));
  CHECK(at::equal(got, want));
  const int64_t zeros = (got == 0).sum().item<int64_t>();
  CHECK(zeros > 0);
  CHECK(zeros < got.numel());
  plain->eval();  // no dropout outside training
  CHECK(at::equal(vescale::nn::call(plain, x), at::matmul(x, plain->w)));
  plan::remove_forward_hooks(*plain);
}

TEST_CASE("static eager replays the recorded dispatch and trains bitwise like eager",
          "[plan][world2][world4]") {
  const int world = dist::world_size();
  auto mesh = mesh::DeviceMesh::init({{"tp", world}});
  auto plan = plan::Plan::from_json_file(repo_file("configs/plans/llama_tp_sp.json"));
  const auto o = scaled_tiny_llama();
  Trained eager = train_planned<vescale::models::Llama>(o, plan, mesh, {.short_step = 7});
  const auto before = dtensor::static_eager_stats();
  Trained replay =
      train_planned<vescale::models::Llama>(o, plan, mesh, {.static_eager = true, .short_step = 7});
  const auto after = dtensor::static_eager_stats();
  const int64_t replayed = after.replayed - before.replayed,
                recorded = after.recorded - before.recorded,
                diverged = after.diverged - before.diverged;
  if (dist::rank() == 0)
    std::printf("static eager (world %d): %lld calls replayed, %lld recorded, %lld diverged\n",
                world, static_cast<long long>(replayed), static_cast<long long>(recorded),
                static_cast<long long>(diverged));
  // Almost every call of the 20 steps is replayed; the short step (a new shape) and the step
  // after it (the old shape again) diverge and record.
  CHECK(replayed > 10 * recorded / 4);
  CHECK(diverged >= 2);
  REQUIRE(eager.losses.size() == replay.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(eager.losses[i] == replay.losses[i]);  // bitwise
  }
  for (auto& [name, t] : eager.final) {
    INFO(name);
    CHECK(at::equal(replay.final.at(name), t));
  }
}

TEST_CASE("phase before_sharding keeps a parameter's values through the init",
          "[plan][world2][world4]") {
  const int world = dist::world_size();
  auto mesh = mesh::DeviceMesh::init({{"tp", world}});
  auto shipped = plan::Plan::from_json_file(repo_file("configs/plans/llama_tp.json"));
  plan::Plan plan = shipped;
  plan.phase("layers.*.attention.wq.weight", plan::InitPhase::BeforeSharding);
  const auto o = scaled_tiny_llama();
  auto loaded = [](const at::Tensor& p) {
    return at::arange(p.numel(), at::kFloat).reshape(p.sizes()) / 1000.0;
  };

  random::manual_seed(7);
  vescale::models::Llama model(o);
  {
    torch::NoGradGuard g;
    for (auto& p : model->named_parameters())
      if (p.key().find("attention.wq") != std::string::npos) p.value().copy_(loaded(p.value()));
  }
  plan::parallelize(*model, plan, mesh, {.init = [&] { model->init_weights(); }});
  auto got = full_params(*model);

  random::manual_seed(7);
  vescale::models::Llama ref(o);
  plan::parallelize(*ref, replicate_all({"tp"}), mesh, {.init = [&] { ref->init_weights(); }});
  auto want = full_params(*ref);
  int kept = 0;
  for (auto& [name, t] : want) {
    INFO(name);
    if (name.find("attention.wq") != std::string::npos) {
      CHECK(at::equal(got.at(name), loaded(t)));
      ++kept;
    } else {
      CHECK(at::equal(got.at(name), t));
    }
  }
  CHECK(kept == o.n_layers);
  plan::remove_forward_hooks(*model);
}

// The collectives of one TP training step (forward, vocab-parallel loss, backward, gradient
// reduction), counted by the process groups, against Megatron's by hand: per block one
// all-reduce after each row-parallel output and one of each column-parallel input gradient;
// one after the vocab-parallel embedding and one of the head's input gradient; the loss's max
// and sum of exponentials (its gradient is local: rules/cross_entropy.cpp). No gradient
// reduction after backward, and no other collective but the `gathers` named below.
template <class Model, class Options>
void check_tp_step_collectives(const std::string& file, const Options& o, int64_t all_reduces,
                               int64_t gathers) {
  auto mesh = mesh::DeviceMesh::init({{"tp", dist::world_size()}});
  random::manual_seed(1234);
  Model model(o);
  parallel::parallelize(*model, plan::Plan::from_json_file(repo_file(file)), mesh,
                        {.init = [&] { model->init_weights(); }});
  auto full = batch(0, vocab_of(o));
  auto x = model_input(full.slice(1, 0, kSeq).contiguous(), mesh);
  auto y = model_input(full.slice(1, 1, kSeq + 1).contiguous(), mesh);
  const auto before = dist::collective_stats();
  dtensor::reset_dispatch_stats();
  dtensor::set_redistribution_log(true);
  at::Tensor loss = lm_loss(vescale::nn::call(model, x), y);
  loss.backward();
  parallel::reduce_gradients(*model);
  const auto after = dist::collective_stats();
  dtensor::set_redistribution_log(false);
  std::string moves;
  for (auto& [what, n] : dtensor::redistribution_log())
    moves += what + ": " + std::to_string(n) + "; ";
  INFO(file << ", redistributions: " << moves);
  if (gathers == 0) CHECK(dtensor::dispatch_stats().redistributions == 0);
  CHECK(after.all_reduce - before.all_reduce == all_reduces);
  CHECK(after.all_gather - before.all_gather == gathers);
  CHECK(after.total() - before.total() == all_reduces + gathers);
  plan::remove_forward_hooks(*model);
}

TEST_CASE("a TP step makes Megatron's all-reduces and no other collective",
          "[plan][world2][world4]") {
  const int64_t L = scaled_tiny_llama().n_layers;
  check_tp_step_collectives<vescale::models::Llama>("configs/plans/llama_tp.json", scaled_tiny_llama(),
                                           4 * L + 4, 0);
  // Mixtral's experts are replicated: only attention is split, two all-reduces per block.
  check_tp_step_collectives<vescale::models::Mixtral>("configs/plans/mixtral_tp.json", tiny_mixtral(),
                                             2 * tiny_mixtral().llama.n_layers + 4, 0);
  // GPT-2's fused c_attn holds q, k and v side by side, so a rank's rows are not whole heads:
  // the split gathers it, and attention's output gradient is gathered back (one each per block).
  const int64_t G = tiny_gpt().n_layer;
  check_tp_step_collectives<vescale::models::GPT>("configs/plans/gpt2_tp.json", tiny_gpt(), 4 * G + 4,
                                         2 * G);
}

TEST_CASE("two models in one process keep their own hooks: parallelized differently, hooks removed one at a time",
          "[plan][world2]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", dist::world_size()}});
  const auto o = tiny_llama(kSeq);
  auto build = [&](const char* plan_file) {
    random::manual_seed(1234);
    vescale::models::Llama m(o);
    parallel::parallelize(*m, plan::Plan::from_json_file(repo_file(plan_file)), mesh,
                          {.init = [&] { m->init_weights(); }});
    return m;
  };
  auto slots = [](vescale::models::Llama& m, const std::string& name) {
    for (const auto& item : m->named_modules())
      if (item.key() == name) return nn::hook_slots(*item.value());
    FAIL("no module " << name);
    return std::vector<nn::HookSlot>{};
  };
  using Slots = std::vector<nn::HookSlot>;
  // The same weights under two plans: sequence-parallel and plain tensor-parallel (both hook
  // layers.*.attention, each its own way).
  vescale::models::Llama sp = build("configs/plans/llama_tp_sp.json"), tp = build("configs/plans/llama_tp.json");
  const auto x = model_input(batch(0, o.vocab_size).slice(1, 0, kSeq).contiguous(), mesh);
  auto logits = [&](vescale::models::Llama& m) {
    torch::NoGradGuard no_grad;
    return dtensor::full_tensor(m->forward(x));
  };
  const at::Tensor want_sp = logits(sp), want_tp = logits(tp);
  CHECK(at::allclose(want_sp, want_tp, 1e-5, 1e-5));  // one model, two layouts
  CHECK(slots(sp, "layers.0.attention") == Slots{nn::HookSlot::Plan});
  CHECK(slots(tp, "layers.0.attention") == Slots{nn::HookSlot::Plan});
  // Activation checkpointing on one model's blocks adds a link there only.
  auto checkpointed = parallel::enable_activation_checkpointing(*sp, "layers.*");
  REQUIRE(checkpointed.size() == static_cast<size_t>(o.n_layers));
  CHECK(slots(sp, "layers.0") == Slots{nn::HookSlot::Checkpoint});
  CHECK(slots(tp, "layers.0").empty());
  CHECK(at::equal(logits(tp), want_tp));
  CHECK(at::equal(logits(sp), want_sp));
  // The first model's plan hooks go; its checkpointing link and the other model's hooks stay.
  plan::remove_forward_hooks(*sp);
  CHECK(slots(sp, "layers.0.attention").empty());
  CHECK(slots(sp, "layers.0") == Slots{nn::HookSlot::Checkpoint});
  CHECK(slots(tp, "layers.0.attention") == Slots{nn::HookSlot::Plan});
  CHECK(at::equal(logits(tp), want_tp));
  checkpointed.clear();
  CHECK(slots(sp, "layers.0").empty());
  CHECK(at::equal(logits(tp), want_tp));
  plan::remove_forward_hooks(*tp);
  CHECK(slots(tp, "layers.0.attention").empty());
}
