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

#include "gpt.h"
#include "module_hooks.h"
#include "vescale/ddp/grad_reduce.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"

using namespace vescale;

namespace {

constexpr int64_t kBatch = 4, kSeq = 16, kSteps = 20;
constexpr double kLr = 3e-3;

models::GPTOptions tiny_gpt(double dropout = 0.0) {
  models::GPTOptions o;
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

// The same tokens on every rank: [B, T+1], inputs and next-token targets. Each row counts up
// by a per-row stride from a random start, so there is something to learn.
at::Tensor batch(int64_t step, int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto start = at::randint(vocab, {kBatch, 1}, gen, at::kLong);
  auto stride = at::randint(1, 4, {kBatch, 1}, gen, at::kLong);
  return (start + stride * at::arange(kSeq + 1, at::kLong)).remainder(vocab);
}

plan::Plan replicate_all(const std::vector<std::string>& dims) {
  plan::Plan p(dims);
  p.shard("*", dtensor::Placements(dims.size(), dtensor::Replicate()));
  return p;
}

std::string repo_file(const std::string& rel) { return std::string(VESCALE_SOURCE_DIR) + "/" + rel; }

struct Trained {
  std::map<std::string, at::Tensor> init;   // full values, before the first step
  std::vector<double> losses;
  std::map<std::string, at::Tensor> final;  // full values, after the last step
};

std::map<std::string, at::Tensor> full_params(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& p : m.named_parameters()) {
    const at::Tensor& t = p.value();
    out[p.key()] = (dtensor::is_dtensor(t) ? dtensor::full_tensor(t.detach()) : t.detach()).clone();
  }
  return out;
}

// This rank's part of the batch: rows split over the dp dim (if any), the rest replicated.
at::Tensor model_input(const at::Tensor& full, const mesh::DeviceMesh& mesh) {
  dtensor::Placements pl(mesh.ndim(), dtensor::Replicate());
  at::Tensor local = full;
  for (int64_t d = 0; d < mesh.ndim(); ++d) {
    if (mesh.dim_names()[d] != "dp") continue;
    pl[d] = dtensor::Shard(0);
    local = full.chunk(mesh.size("dp"), 0)[mesh.coordinate("dp")];
  }
  return dtensor::from_local(local.contiguous(), mesh, pl, full.sizes().vec());
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.flatten(0, 1), targets.flatten(0, 1));
}

Trained train_planned(const models::GPTOptions& o, const plan::Plan& plan, const mesh::DeviceMesh& mesh) {
  random::manual_seed(1234);
  models::GPT model(o);
  plan::parallelize(*model, plan, mesh, {.init = [&] { model->init_weights(); }});
  Trained r;
  r.init = full_params(*model);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(0.1));
  for (int64_t s = 0; s < kSteps; ++s) {
    auto full = batch(s, o.vocab_size);
    auto x = model_input(full.slice(1, 0, kSeq).contiguous(), mesh);
    auto y = model_input(full.slice(1, 1, kSeq + 1).contiguous(), mesh);
    opt.zero_grad();
    auto loss = lm_loss(models::call(model, x), y);
    loss.backward();
    ddp::reduce_gradients(*model);
    opt.step();
    r.losses.push_back(dtensor::full_tensor(loss.detach()).item<double>());
  }
  r.final = full_params(*model);
  plan::remove_forward_hooks(*model);
  return r;
}

// The single-device reference: plain tensors, libtorch alone, from the given initial values.
Trained train_plain(const models::GPTOptions& o, const std::map<std::string, at::Tensor>& init) {
  models::GPT model(o);
  {
    torch::NoGradGuard g;
    for (auto& p : model->named_parameters()) p.value().copy_(init.at(p.key()));
  }
  Trained r;
  r.init = init;
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(0.1));
  for (int64_t s = 0; s < kSteps; ++s) {
    auto full = batch(s, o.vocab_size);
    opt.zero_grad();
    auto loss = lm_loss(model->forward(full.slice(1, 0, kSeq)), full.slice(1, 1, kSeq + 1));
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item<double>());
  }
  r.final = full_params(*model);
  return r;
}

void check_close(const Trained& got, const Trained& want, double rtol, const std::string& label) {
  REQUIRE(got.losses.size() == want.losses.size());
  double worst_loss = 0, worst_param = 0;
  for (size_t i = 0; i < got.losses.size(); ++i)
    worst_loss = std::max(worst_loss, std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]));
  for (auto& [name, w] : want.final)
    worst_param = std::max(worst_param, (got.final.at(name) - w).abs().max().item<double>());
  if (dist::rank() == 0)
    std::printf("%s (world %d): loss %.4f -> %.4f, max loss rel diff %.2e, max param diff %.2e\n", label.c_str(),
                dist::world_size(), want.losses.front(), want.losses.back(), worst_loss, worst_param);
  for (size_t i = 0; i < got.losses.size(); ++i) {
    INFO("step " << i << ": " << got.losses[i] << " vs " << want.losses[i]);
    CHECK(std::abs(got.losses[i] - want.losses[i]) <= rtol * std::abs(want.losses[i]));
  }
  CHECK(want.losses.back() < want.losses.front() * 0.9);  // it trained
  for (auto& [name, w] : want.final) {
    const at::Tensor& g = got.final.at(name);
    const double err = (g - w).abs().max().item<double>(), scale = w.abs().max().item<double>();
    std::string where;
    if (name.find("c_attn.bias") != std::string::npos)
      for (auto& part : (g - w).abs().chunk(3)) where += " " + std::to_string(part.max().item<double>());
    INFO(name << ": max diff " << err << " of max " << scale << where);
    CHECK(err <= rtol * std::max(scale, 1.0));
  }
}

struct Case {
  const char* plan;
  mesh::MeshDims dims;
};

std::vector<Case> gpt_cases(int world) {
  std::vector<Case> cases = {{"configs/plans/gpt2_tp.json", {{"tp", world}}},
                             {"configs/plans/gpt2_tp_sp.json", {{"tp", world}}}};
  if (world == 4) cases.push_back({"configs/plans/gpt2_dp_tp.json", {{"dp", 2}, {"tp", 2}}});
  if (world == 2) cases.push_back({"configs/plans/gpt2_dp_tp.json", {{"dp", 2}, {"tp", 1}}});
  return cases;
}

}  // namespace

TEST_CASE("GPT under each shipped plan trains like one device", "[plan][world2][world4]") {
  const int world = dist::world_size();
  const auto o = tiny_gpt();
  for (const auto& c : gpt_cases(world)) {
    SECTION(c.plan) {
      auto mesh = mesh::DeviceMesh::init(c.dims);
      auto plan = plan::Plan::from_json_file(repo_file(c.plan));
      // Single-device semantics: everything replicated computes the full tensors locally.
      Trained ref_init = train_planned(o, replicate_all(plan.mesh_dims()), mesh);
      Trained got = train_planned(o, plan, mesh);
      for (auto& [name, t] : ref_init.init) {
        INFO(name);
        CHECK(at::equal(got.init.at(name), t));  // init through the plan: bitwise
      }
      check_close(got, train_plain(o, ref_init.init), 1e-5, c.plan);
    }
  }
}

TEST_CASE("dropout under TP+SP equals the replicated run bitwise in forward", "[plan][world2][world4]") {
  const int world = dist::world_size();
  auto o = tiny_gpt(/*dropout=*/0.1);
  auto mesh = mesh::DeviceMesh::init({{"tp", world}});
  auto plan = plan::Plan::from_json_file(repo_file("configs/plans/gpt2_tp_sp.json"));
  Trained ref = train_planned(o, replicate_all({"tp"}), mesh);
  Trained got = train_planned(o, plan, mesh);
  // Same masks everywhere, so the runs differ only by float reduction order.
  check_close(got, ref, 1e-5, "gpt2_tp_sp dropout 0.1 vs replicated");
}

TEST_CASE("parallelize on a 1-rank mesh is single-device training", "[plan][any]") {
  if (dist::world_size() != 1) return;
  const auto o = tiny_gpt();
  auto mesh = mesh::DeviceMesh::init({{"tp", 1}});
  auto plan = plan::Plan::from_json_file(repo_file("configs/plans/gpt2_tp.json"));
  Trained got = train_planned(o, plan, mesh);
  check_close(got, train_plain(o, got.init), 1e-6, "gpt2_tp on a 1-rank mesh");
}
