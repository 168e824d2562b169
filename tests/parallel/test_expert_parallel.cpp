// Expert parallelism trains like one device: EP=2, EP=4, EP x TP (expert tensor parallelism) and
// EP folded over DP, with dropless all-to-all dispatch; skewed routing and a rank that receives
// no token; bitwise repeatable runs; capacity drops by the single-device rule. Every reference
// is the same model on one process (a 1-rank mesh of each rank's own), on the same tokens.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <torch/nn/module.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <utility>

#include "common/train_util.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/models/qwen3/qwen3.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/expert/expert_parallel.h"
#include "vescale/parallel/grad_layout.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/train/trainer.h"

using namespace vescale;
using namespace vescale::train;

namespace {

Config tiny_mixtral(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o{"train.batch_size=2",  "train.seq_len=16",     "train.warmup_steps=2",
                             "train.steps=10",      "train.lr=3e-3",        "log.metrics_jsonl=\"\"",
                             "model.dim=32",        "model.n_layers=2",     "model.n_heads=4",
                             "model.n_kv_heads=2",  "model.ffn_dim=32",     "model.max_seq_len=16",
                             "model.n_experts=4",   "model.top_k=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  return Config::from_file(testing::repo_file("configs/mixtral_tiny.json"), o);
}

int64_t data_size(const mesh::MeshDims& dims) {
  int64_t n = 1;
  for (auto& [name, size] : dims)
    if (name == "dp" || name == "ep") n *= size;
  return n;
}

std::vector<double> train_losses(Config cfg, std::optional<mesh::DeviceMesh> mesh, int steps,
                                 std::map<std::string, at::Tensor>* params = nullptr) {
  Trainer t(std::move(cfg), std::move(mesh));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(t.step(s).loss);
  if (params) *params = testing::full_params(*t.model().module);
  return losses;
}

// The plan on the mesh for 10 steps vs one process with the whole batch: losses and every
// parameter (experts gathered) within 1e-5 relative.
void check_trains_like_one_device(const std::string& plan, const mesh::MeshDims& dims,
                                  const std::vector<std::string>& extra = {}) {
  auto world = mesh::DeviceMesh::init(dims);
  Config ref_cfg = tiny_mixtral(extra);
  ref_cfg.train.batch_size *= data_size(dims);
  std::map<std::string, at::Tensor> ref_params, params;
  const auto ref = train_losses(ref_cfg, world.submesh({}), 10, &ref_params);
  Config cfg = tiny_mixtral(extra);
  cfg.parallel.plan = testing::repo_file("configs/plans/" + plan);
  cfg.parallel.mesh = dims;
  parallel::expert::reset_dispatch_stats();
  const auto got = train_losses(cfg, world, 10, &params);
  for (size_t s = 0; s < ref.size(); ++s) {
    INFO(plan << " step " << s + 1 << ": " << got[s] << " vs one device " << ref[s]);
    CHECK(std::abs(got[s] - ref[s]) <= 1e-5 * std::abs(ref[s]));
  }
  CHECK(got.back() < got.front());
  for (auto& [name, p] : params) {
    INFO(plan << ": " << name);
    const double scale = std::max(ref_params.at(name).abs().max().item<double>(), 1.0);
    CHECK((p - ref_params.at(name)).abs().max().item<double>() <= 1e-5 * scale);
  }
  // Tokens really moved: forward and backward, both directions, every layer and step.
  const auto stats = parallel::expert::dispatch_stats();
  CHECK(stats.dispatches >= 10 * 2);
  CHECK(stats.all_to_alls >= 10 * 2 * 4);
}

// One forward and backward of a MoE transformer (Mixtral, Qwen3-MoE): the loss and every gradient, gathered
// whole (plain tensors), on `mesh` under `plan` or, with no plan, on this process alone.
struct Grads {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
};
template <class Holder, class Options>
Grads grads_of(const Options& o, const at::Tensor& tokens,
               const std::function<void(typename Holder::ContainedType&)>& set_weights,
               const plan::Plan* plan, const mesh::DeviceMesh* mesh) {
  Holder model(o);
  set_weights(*model);
  if (plan) parallel::parallelize(*model, *plan, *mesh);  // keeps the weights set above
  auto input = tokens.narrow(1, 0, tokens.size(1) - 1), target = tokens.narrow(1, 1, tokens.size(1) - 1);
  if (plan) input = testing::model_input(input, *mesh), target = testing::model_input(target, *mesh);
  at::Tensor logits = model->forward(input);  // before aux_loss, which reads the router logits
  at::Tensor loss = testing::lm_loss(logits, target) + 0.1 * model->aux_loss();
  loss.backward();
  Grads g;
  g.loss = (plan ? dtensor::full_tensor(loss) : loss).item<double>();
  for (const auto& p : model->named_parameters()) {
    const at::Tensor& grad = p.value().grad();
    REQUIRE(grad.defined());
    g.grads[p.key()] = plan ? dtensor::full_tensor(grad) : grad;
  }
  return g;
}

vescale::models::MixtralOptions layer_options() {
  vescale::models::MixtralOptions o;
  o.llama.vocab_size = 64, o.llama.dim = 16, o.llama.n_layers = 2, o.llama.n_heads = 2;
  o.llama.n_kv_heads = 2, o.llama.ffn_dim = 24, o.llama.max_seq_len = 16;
  o.moe.n_experts = 4, o.moe.top_k = 2;
  return o;
}

plan::Plan ep_plan(const std::string& file = "mixtral_ep.json") {
  return plan::Plan::from_json_file(testing::repo_file("configs/plans/" + file));
}

void check_grads_equal(const Grads& got, const Grads& want);

// The model at EP=2 (mixtral_ep.json) against one device, same weights and tokens: loss and
// gathered gradients; returns the reference's and the boundary's dispatch stats.
template <class Holder = vescale::models::Mixtral, class Options>
std::pair<Grads, parallel::expert::DispatchStats> check_ep2_grads(
    const Options& o, const at::Tensor& tokens,
    const std::function<void(typename Holder::ContainedType&)>& weights, uint64_t seed,
    const std::string& plan_file = "mixtral_ep.json") {
  auto world = mesh::DeviceMesh::init({{"ep", 2}});
  at::manual_seed(seed);
  auto want = grads_of<Holder>(o, tokens, weights, nullptr, nullptr);
  parallel::expert::reset_dispatch_stats();
  at::manual_seed(seed);
  const auto plan = ep_plan(plan_file);
  const auto got = grads_of<Holder>(o, tokens, weights, &plan, &world);
  check_grads_equal(got, want);
  return {std::move(want), parallel::expert::dispatch_stats()};
}

void check_grads_equal(const Grads& got, const Grads& want) {
  CHECK(std::abs(got.loss - want.loss) <= 1e-6 * std::abs(want.loss));
  for (auto& [name, g] : want.grads) {
    INFO(name);
    const double scale = std::max(g.abs().max().item<double>(), 1e-3);
    CHECK((got.grads.at(name) - g).abs().max().item<double>() <= 1e-5 * scale);
  }
}

}  // namespace

TEST_CASE("EP=2: dropless all-to-all dispatch trains like one device", "[moe][world2]") {
  check_trains_like_one_device("mixtral_ep.json", {{"ep", 2}});
}

TEST_CASE("EP=2: expert-weight and router gradients equal one device's after gathering",
          "[moe][world2]") {
  const auto o = layer_options();
  auto tokens = testing::counting_tokens(5, 4, 12, o.llama.vocab_size);
  // The model's own init (same seed on every rank).
  check_ep2_grads(o, tokens, [](vescale::models::MixtralImpl&) {}, 7);
}

TEST_CASE("Qwen3-MoE at EP=2 under its shipped plan equals one device in loss and gradients "
          "with and without renormalized top-k",
          "[moe][world2]") {
  vescale::models::Qwen3MoeOptions o;
  o.qwen3.llama = {.vocab_size = 64, .dim = 16, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
                   .ffn_dim = 12, .norm_eps = 1e-6, .max_seq_len = 16};
  o.qwen3.head_dim = 12;  // heads wider than dim / n_heads, as Qwen3-30B-A3B's
  o.moe = {.n_experts = 4, .top_k = 2, .normalize_top_k = true, .aux_loss_coef = 0.001};
  auto tokens = testing::counting_tokens(8, 4, 12, o.qwen3.llama.vocab_size);
  for (bool normalize : {true, false}) {
    INFO("normalize_top_k " << normalize);
    o.moe.normalize_top_k = normalize;
    check_ep2_grads<vescale::models::Qwen3Moe>(
        o, tokens, [](vescale::models::Qwen3MoeImpl&) {}, 11, "qwen3_moe_ep.json");
  }
}

TEST_CASE("EP=2: every token routed to one expert, so one rank receives none: same results, no hang",
          "[moe][world2]") {
  const auto o = layer_options();
  auto tokens = testing::counting_tokens(6, 4, 12, o.llama.vocab_size);
  // Router rows favour experts 0 and 1 for every token: both live on ep rank 0; rank 1 holds
  // experts 2 and 3 and receives zero tokens, yet joins every all-to-all, forward and backward.
  auto skew = [](vescale::models::MixtralImpl& m) {
    torch::NoGradGuard no_grad;
    for (auto& l : *m.layers) {
      auto& router = vescale::models::moe_of(*l).router->weight;
      router.zero_();
      router[0].fill_(1.0), router[1].fill_(0.5);
    }
    m.tok_embeddings->weight.abs_();  // positive activations: expert 0 first, then 1
  };
  const auto [want, stats] = check_ep2_grads(o, tokens, skew, 8);
  // The experts rank 1 holds got no token: zero gradients, exactly.
  CHECK(want.grads.at("layers.0.feed_forward.experts.w1").narrow(0, 2, 2).abs().max().item<double>() == 0);
  if (dist::rank() == 1) CHECK(stats.rows_sent > 0);  // rank 1 sends all its tokens away
}

TEST_CASE("EP=2: two runs of the same configuration give bitwise equal losses", "[moe][world2]") {
  auto world = mesh::DeviceMesh::init({{"ep", 2}});
  Config cfg = tiny_mixtral();
  cfg.parallel.plan = testing::repo_file("configs/plans/mixtral_ep.json");
  cfg.parallel.mesh = {{"ep", 2}};
  const auto a = train_losses(cfg, world, 4);
  const auto b = train_losses(cfg, world, 4);
  for (size_t s = 0; s < a.size(); ++s) CHECK(a[s] == b[s]);
}

TEST_CASE("EP=2 with a capacity factor drops the tokens the single-device rule drops",
          "[moe][world2]") {
  // Capacity over the global batch, first come first served in token order: rank 1's tokens
  // queue behind rank 0's (one all-gather of the counts), so EP drops what one device drops.
  auto o = layer_options();
  o.moe.capacity_factor = 0.5;
  auto tokens = testing::counting_tokens(9, 4, 12, o.llama.vocab_size);
  const auto stats = check_ep2_grads(o, tokens, [](vescale::models::MixtralImpl&) {}, 9).second;
  CHECK(stats.dropped > 0);  // forward of 2 layers dropped some
}

TEST_CASE("EP=4: one expert per rank trains like one device", "[moe][world4]") {
  check_trains_like_one_device("mixtral_ep.json", {{"ep", 4}});
}

TEST_CASE("EP=2 x TP=2: experts split by index over ep and by hidden dim over tp train like one device",
          "[moe][world4]") {
  check_trains_like_one_device("mixtral_ep_tp.json", {{"ep", 2}, {"tp", 2}});
}

TEST_CASE("EP=2 x TP=2: the gradient layout foresees the router's gradient, Partial over ep and tp",
          "[moe][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"ep", 2}, {"tp", 2}});
  const auto plan = plan::Plan::from_json_file(testing::repo_file("configs/plans/mixtral_ep_tp.json"));
  const auto o = layer_options();
  vescale::models::Mixtral model(o);
  parallel::parallelize(*model, plan, mesh);
  const parallel::GradLayout layout(*model, mesh, plan, {});
  for (const auto& p : layout.params()) {
    INFO(p.name);
    const bool expert = p.name.find(".experts.") != std::string::npos;
    const bool router = p.name.find(".router.") != std::string::npos;
    // Experts are sharded on both dims: nothing to reduce. Everything else saw other tokens
    // over ep; the routers also meet the experts' outputs, Partial over tp.
    CHECK((p.bucket < 0) == expert);
    if (!expert) CHECK(p.grad_placements[0].is_partial());
    if (!expert) CHECK(p.grad_placements[1].is_partial() == router);
  }
  const auto tokens = testing::counting_tokens(7, 4, o.llama.max_seq_len, o.llama.vocab_size);
  auto input = testing::model_input(tokens.narrow(1, 0, o.llama.max_seq_len), mesh);
  auto target = testing::model_input(tokens.narrow(1, 1, o.llama.max_seq_len), mesh);
  auto logits = model->forward(input);
  (testing::lm_loss(logits, target) + 0.1 * model->aux_loss()).backward();
  // The vocab-parallel embedding's whole-table gradient is the one surprise (a local slice).
  CHECK(testing::unforeseen_gradients(layout) ==
        std::vector<std::string>{
            "tok_embeddings.weight: [Partial(sum), Replicate] (expected [Partial(sum), Shard(0)])"});
}

TEST_CASE("EP folded over DP=2: dp x ep ranks all see other tokens, experts replicated over dp",
          "[moe][world4]") {
  check_trains_like_one_device("mixtral_ep_dp.json", {{"dp", 2}, {"ep", 2}}, {"parallel.zero=1"});
}
