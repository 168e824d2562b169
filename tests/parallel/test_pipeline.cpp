// Pipeline parallelism trains like one device: every schedule at PP=2 and PP=4, composed with
// dp (ZeRO-1), tp with sequence parallelism, and tied embeddings. Each rank also trains the
// single-device reference itself (a 1-rank mesh of its own process), on the same data.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/train_util.h"
#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/train/forward_backward.h"
#include "vescale/train/trainer.h"

using namespace vescale;
using namespace vescale::train;

namespace {

struct PipelineCase {
  std::string plan;  // a shipped plan under configs/plans/
  std::string schedule;
  int microbatches;
  int chunks = 1;
  mesh::MeshDims mesh;
  std::vector<std::string> extra = {};  // config overrides
  double tolerance = 1e-5;              // relative, on losses and parameters
};

// The shipped plan with this case's schedule, written where every rank reads it.
std::string plan_file(const PipelineCase& c) {
  nlohmann::ordered_json j;
  std::ifstream(testing::repo_file("configs/plans/" + c.plan)) >> j;
  j["pipeline"]["schedule"] = c.schedule;
  j["pipeline"]["microbatches"] = c.microbatches;
  j["pipeline"]["chunks"] = c.chunks;
  const std::string path = "/tmp/vescale_pp_plan." + std::to_string(::getppid()) + "." +
                           c.schedule + "." + std::to_string(dist::rank()) + ".json";
  std::ofstream(path) << j.dump();
  return path;
}

Config tiny(const std::string& family, int microbatches, const std::vector<std::string>& extra) {
  std::vector<std::string> o{"train.batch_size=2", "train.seq_len=16", "train.warmup_steps=2",
                             "train.steps=10",     "train.eval_steps=2", "train.lr=3e-3",
                             "log.metrics_jsonl=\"\"", "train.grad_accum=" + std::to_string(microbatches)};
  if (family == "mixtral") {
    for (auto s : {"model.dim=32", "model.n_layers=4", "model.n_heads=4", "model.n_kv_heads=2",
                   "model.ffn_dim=32", "model.max_seq_len=16"})
      o.push_back(s);
  } else if (family == "llama") {
    for (auto s : {"model.dim=32", "model.n_layers=6", "model.n_heads=4", "model.n_kv_heads=2",
                   "model.ffn_dim=64", "model.max_seq_len=16"})
      o.push_back(s);
  } else {
    for (auto s : {"model.n_embd=32", "model.n_layer=4", "model.n_head=4", "model.n_positions=16"})
      o.push_back(s);
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return Config::from_file(testing::repo_file("configs/" + std::string(family == "llama"     ? "llama_tiny"
                                                                     : family == "mixtral" ? "mixtral_tiny"
                                                                                           : "nanogpt_tiny") +
                                              ".json"),
                           o);
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> params;  // this rank's, gathered whole
  int64_t peak_live = 0;
  int64_t peak_sends_held = 0;
  int64_t overlapped = -1;  // buckets the reducer launched during backward, last step
  int64_t buckets = -1;     // buckets it reduced in that step
};

Run train(Config cfg, std::optional<mesh::DeviceMesh> mesh, int steps) {
  Trainer t(std::move(cfg), std::move(mesh));
  Run r;
  for (int s = 0; s < steps; ++s) r.losses.push_back(t.step(s).loss);
  r.params = testing::full_params(*t.model().module);
  if (const auto* stats = t.forward_backward().stats()) {
    r.peak_live = stats->peak_live;
    r.peak_sends_held = stats->peak_sends_held;
  }
  if (t.grad_reducer()) {
    r.overlapped = t.grad_reducer()->last_step().overlapped;
    r.buckets = t.grad_reducer()->last_step().buckets;
  }
  return r;
}

// Runs the case and its single-device reference; losses and this rank's parameters within
// 1e-5 relative.
Run check_matches_one_device(const PipelineCase& c, const std::string& family = "llama") {
  const int steps = 10;
  auto world = mesh::DeviceMesh::init(c.mesh);
  Config ref_cfg = tiny(family, c.microbatches, c.extra);
  // The reference: one process, the whole batch (dp ranks x rows) per micro-batch.
  int64_t dp = 1;
  for (auto& [n, s] : c.mesh)
    if (n == "dp") dp = s;
  ref_cfg.train.batch_size *= dp;
  Run ref = train(ref_cfg, world.submesh({}), steps);

  Config cfg = tiny(family, c.microbatches, c.extra);
  cfg.parallel.plan = plan_file(c);
  cfg.parallel.mesh = c.mesh;
  Run run = train(cfg, world, steps);
  std::remove(cfg.parallel.plan.c_str());
  for (int s = 0; s < steps; ++s) {
    INFO(c.schedule << " step " << s + 1 << ": " << run.losses[s] << " vs one device "
                    << ref.losses[s]);
    CHECK(std::abs(run.losses[s] - ref.losses[s]) <= c.tolerance * std::abs(ref.losses[s]));
  }
  CHECK(run.losses.back() < run.losses.front());
  REQUIRE(!run.params.empty());
  for (auto& [name, p] : run.params) {
    INFO(c.schedule << ": " << name);
    REQUIRE(ref.params.count(name));
    const double scale = ref.params[name].abs().max().item<double>();
    CHECK((p - ref.params[name]).abs().max().item<double>() <= c.tolerance * std::max(scale, 1.0));
  }
  return run;
}

}  // namespace

TEST_CASE("every schedule at PP=2 trains like one device", "[pipeline][world2]") {
  auto gpipe = check_matches_one_device({"llama_pp.json", "gpipe", 4, 1, {{"pp", 2}}});
  auto f1b1 = check_matches_one_device({"llama_pp.json", "1f1b", 8, 1, {{"pp", 2}}});
  // 3 micro-batches for 2 ranks: not a multiple.
  check_matches_one_device({"llama_pp.json", "interleaved_1f1b", 3, 2, {{"pp", 2}}});
  check_matches_one_device({"llama_pp.json", "zb_h1", 4, 1, {{"pp", 2}},
                            {"train.activation_checkpointing=true"}});
  // Memory counters: stage 0 holds every micro-batch under GPipe, at most PP under 1F1B.
  if (dist::rank() == 0) {
    CHECK(gpipe.peak_live == 4);
    CHECK(f1b1.peak_live == 2);
  }
  // Each sent activation or gradient is freed once the peer has shown it consumed it, not at
  // the step's end: at most 2 held of 1F1B's 8 per rank.
  INFO("rank " << dist::rank() << " held " << f1b1.peak_sends_held << " sent tensors at once");
  CHECK(f1b1.peak_sends_held <= 2);
}

TEST_CASE("GPT's tied embedding on the first and the last stage stays one weight",
          "[pipeline][world2]") {
  check_matches_one_device({"gpt2_pp.json", "1f1b", 2, 1, {{"pp", 2}}}, "gpt");
  // Zero bubble: the head's use of the tied weight is not a linear layer's (its gradient comes in
  // I), the blocks' linear weights wait for W.
  check_matches_one_device({"gpt2_pp.json", "zb_h1", 2, 1, {{"pp", 2}}}, "gpt");
}

TEST_CASE("Mixtral's load-balancing loss over every layer: its statistics travel with the "
          "activations",
          "[pipeline][world2]") {
  // The aux loss multiplies counts summed over all layers by probabilities summed over all
  // layers: each stage adds its layers' sums, the last one makes the loss.
  check_matches_one_device({"llama_pp.json", "1f1b", 2, 1, {{"pp", 2}}}, "mixtral");
  check_matches_one_device({"llama_pp.json", "zb_h1", 2, 1, {{"pp", 2}},
                            {"train.activation_checkpointing=true"}},
                           "mixtral");
}

TEST_CASE("bf16 autocast runs inside every stage: PP=2 follows one device in bf16",
          "[pipeline][world2]") {
  // Each stage computes in bf16 as the whole model does on one device; the sums in backward may
  // round differently: 1e-4 (fp32 stages would miss by ~1e-3).
  check_matches_one_device({"llama_pp.json", "1f1b", 2, 1, {{"pp", 2}}, {"train.dtype=\"bf16\""}, 1e-4});
}

TEST_CASE("every schedule at PP=4 trains like one device", "[pipeline][world4]") {
  auto f1b1 = check_matches_one_device({"llama_pp.json", "1f1b", 4, 1, {{"pp", 4}}});
  if (dist::rank() == 0) CHECK(f1b1.peak_live == 4);
  check_matches_one_device({"llama_pp.json", "gpipe", 4, 1, {{"pp", 4}}});
  check_matches_one_device({"llama_pp.json", "interleaved_1f1b", 5, 2, {{"pp", 4}}});
  check_matches_one_device({"llama_pp.json", "zb_h1", 4, 1, {{"pp", 4}},
                            {"train.activation_checkpointing=true"}});
}

TEST_CASE("PP x DP with ZeRO-1 and PP x TP with sequence parallelism train like one device",
          "[pipeline][world4]") {
  auto pp_dp = check_matches_one_device({"llama_pp_dp.json", "1f1b", 2, 1, {{"pp", 2}, {"dp", 2}},
                                        {"parallel.zero=1"}});
  // The dp reduction starts inside the last micro-batch's backward, bucket by bucket: every
  // bucket is launched from backward's hooks, none waits for finish().
  CHECK(pp_dp.buckets > 0);
  CHECK(pp_dp.overlapped == pp_dp.buckets);
  // Zero bubble's deferred weight gradients reach the buckets through their hooks (ZeRO-2).
  auto zb_dp = check_matches_one_device({"llama_pp_dp.json", "zb_h1", 2, 1, {{"pp", 2}, {"dp", 2}},
                                        {"parallel.zero=2"}});
  CHECK(zb_dp.buckets > 0);
  CHECK(zb_dp.overlapped == zb_dp.buckets);
  check_matches_one_device({"llama_pp_tp.json", "zb_h1", 2, 1, {{"pp", 2}, {"tp", 2}}});
}

TEST_CASE("Mixtral's recipe plan (TP + SP with tensor-sharded experts, in stages) trains like one device",
          "[pipeline][world4]") {
  check_matches_one_device({"mixtral_pp_dp_tp.json", "1f1b", 2, 1, {{"pp", 2}, {"dp", 1}, {"tp", 2}}},
                           "mixtral");
}

TEST_CASE("PP x DP x TP = 2 x 2 x 2 trains like one device", "[pipeline][world8]") {
  check_matches_one_device({"llama_pp_dp_tp.json", "1f1b", 2, 1, {{"pp", 2}, {"dp", 2}, {"tp", 2}}});
}

namespace {
// Every parameter of the checkpoint's model, read whole into plain tensors by this process alone.
std::map<std::string, at::Tensor> checkpoint_params(const std::string& folder) {
  const auto info = checkpoint::read_info(folder);
  checkpoint::StateDict state;
  std::map<std::string, at::Tensor> out;
  for (const auto& [key, entry] : info.tensors) {
    if (key.rfind("model/", 0) != 0) continue;
    out[key.substr(6)] = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
    state[key] = out[key.substr(6)];
  }
  checkpoint::load(folder, state);
  return out;
}
}  // namespace

TEST_CASE("a checkpoint saved at PP=2 x DP=2 loads at PP=4, at DP x TP and at one rank; PP resumes "
          "bitwise",
          "[pipeline][checkpoint][world4]") {
  const std::string dir = "/tmp/vescale_pp_ckpt." + std::to_string(::getppid());
  auto mesh = mesh::DeviceMesh::init({{"pp", 2}, {"dp", 2}});
  const PipelineCase saved_case{"llama_pp_dp.json", "1f1b", 2, 1, {{"pp", 2}, {"dp", 2}}};
  auto cfg = [&](const PipelineCase& c, int steps, bool resume) {
    Config x = tiny("llama", c.microbatches, {"train.steps=" + std::to_string(steps)});
    x.parallel.mesh = c.mesh;
    x.parallel.plan = c.plan.empty() ? "" : plan_file(c);
    x.checkpoint.dir = dir;
    x.checkpoint.every = 3;
    x.checkpoint.resume = resume;
    return x;
  };
  if (dist::rank() == 0) std::filesystem::remove_all(dir);
  dist::barrier();
  // 6 steps straight, then 3 and a resume for the last 3 (the second run's dir is fresh).
  std::vector<double> straight;
  {
    Config c = cfg(saved_case, 6, false);
    c.checkpoint.dir = dir + ".straight";
    if (dist::rank() == 0) std::filesystem::remove_all(c.checkpoint.dir);
    dist::barrier();
    Trainer t(c, mesh);
    for (auto& m : t.run()) straight.push_back(m.loss);
  }
  {
    Trainer t(cfg(saved_case, 3, false), mesh);
    t.run();
  }
  const std::string folder = dir + "/step-00000003";
  const auto whole = checkpoint_params(folder);  // at one rank
  REQUIRE(whole.size() == 57);                  // every stage's parameters, each once
  auto same_as_saved = [&](Trainer& t) {
    auto params = testing::full_params(*t.model().module);
    REQUIRE(!params.empty());
    for (auto& [name, p] : params) {
      INFO(name);
      CHECK(at::equal(p, whole.at(name)));
    }
  };
  {
    auto pp4 = mesh::DeviceMesh::init({{"pp", 4}});
    Trainer t(cfg({"llama_pp.json", "1f1b", 4, 1, {{"pp", 4}}}, 3, true), pp4);
    CHECK(t.resumed_step() == 3);
    same_as_saved(t);
  }
  {
    auto dp_tp = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
    Config c = cfg({"", "", 2, 1, {{"dp", 2}, {"tp", 2}}}, 3, true);
    c.parallel.plan = testing::repo_file("configs/plans/llama_dp_tp.json");
    Trainer t(c, dp_tp);
    CHECK(t.resumed_step() == 3);
    same_as_saved(t);
  }
  {
    Trainer t(cfg(saved_case, 6, true), mesh);
    auto rest = t.run();
    REQUIRE(rest.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(rest[i].loss == straight[3 + i]);
  }
  dist::barrier();
  if (dist::rank() == 0) std::filesystem::remove_all(dir), std::filesystem::remove_all(dir + ".straight");
}
