// Sharded checkpoints across ranks: what one mesh and set of placements saved loads bitwise
// into any other (and into plain tensors), each distinct shard is written once, and a LLaMA
// saved under a TP plan loads into a replicated or a plain model.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/train_util.h"
#include "llama/llama.h"
#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"

using namespace vescale;
namespace fs = std::filesystem;

namespace {

// One folder all ranks share: the launcher (or mpirun) is every rank's parent. Emptied once
// every rank is done with it (Catch reruns a test case per SECTION).
std::string shared_root(const std::string& name) {
  const auto dir =
      fs::temp_directory_path() / ("vescale_dcp_" + std::to_string(::getppid())) / name;
  dist::world().barrier().wait();
  if (dist::rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  dist::world().barrier().wait();
  return dir.string();
}

using dtensor::Partial;
using dtensor::Replicate;
using dtensor::Shard;

models::Llama planned_llama(uint64_t seed, const plan::Plan& plan, const mesh::DeviceMesh& mesh) {
  random::manual_seed(seed);
  models::Llama model(testing::tiny_llama(16));
  plan::parallelize(*model, plan, mesh, {.init = [&] { model->init_weights(); }});
  return model;
}

checkpoint::StateDict params_of(torch::nn::Module& m) {
  checkpoint::StateDict s;
  for (const auto& p : m.named_parameters()) s[p.key()] = p.value();
  return s;
}

}  // namespace

TEST_CASE("checkpoint: tensors saved with one mesh and placements load into any other",
          "[checkpoint][world2][world4]") {
  const int w = dist::world_size();
  const auto root = shared_root("reshard");
  // Shapes that split unevenly over w (torch.chunk leaves the last ranks short, some empty).
  at::manual_seed(7);
  const std::map<std::string, at::Tensor> full{{"a", at::randn({7, 5})},
                                               {"b", at::randn({3})},
                                               {"c", at::randn({4, 6}, at::kDouble)},
                                               {"s", at::scalar_tensor(3.5)}};
  auto flat = mesh::DeviceMesh::init({{"x", w}});
  auto grid = w == 4 ? mesh::DeviceMesh::init({{"p", 2}, {"q", 2}}) : flat;
  const bool two_d = w == 4;

  checkpoint::StateDict saved{
      {"a", dtensor::distribute_tensor(full.at("a"), flat, {Shard(0)})},
      {"b", dtensor::distribute_tensor(full.at("b"), flat, {Shard(0)})},
      {"c", two_d ? dtensor::distribute_tensor(full.at("c"), grid, {Shard(1), Shard(0)})
                  : dtensor::distribute_tensor(full.at("c"), flat, {Replicate()})},
      {"s", full.at("s")}};
  const auto folder = checkpoint::save(root, "step-00000001", saved, R"({"who": "test"})");

  // Each distinct shard is written once: replicas and empty shards are not.
  const auto index = nlohmann::json::parse(std::ifstream(fs::path(folder) / "index.json"));
  CHECK(index.at("tensors").at("a").at("chunks").size() ==
        static_cast<size_t>(w));  // 7 rows: none empty
  CHECK(index.at("tensors").at("b").at("chunks").size() == static_cast<size_t>(std::min(w, 3)));
  CHECK(index.at("tensors").at("c").at("chunks").size() == (two_d ? 4u : 1u));
  CHECK(index.at("tensors").at("s").at("chunks").size() == 1u);
  CHECK(index.at("world_size") == w);

  SECTION("into other placements") {
    checkpoint::StateDict target{
        {"a", dtensor::distribute_tensor(at::zeros({7, 5}), flat, {Shard(1)})},
        {"b", dtensor::distribute_tensor(at::zeros({3}), flat, {Replicate()})},
        {"c", two_d ? dtensor::distribute_tensor(at::zeros({4, 6}, at::kDouble), grid,
                                                 {Replicate(), Shard(1)})
                    : dtensor::distribute_tensor(at::zeros({4, 6}, at::kDouble), flat, {Shard(0)})},
        {"s", at::zeros({})}};
    checkpoint::load(folder, target);
    for (const auto& [k, t] : target) {
      INFO(k);
      CHECK((dtensor::is_dtensor(t) ? dtensor::full_tensor(t) : t).equal(full.at(k)));
    }
  }
  SECTION("into plain tensors") {
    checkpoint::StateDict target;
    for (const auto& [k, t] : full) target[k] = at::zeros_like(t);
    checkpoint::load(folder, target);
    for (const auto& [k, t] : target) {
      INFO(k);
      CHECK(t.equal(full.at(k)));
    }
  }
  SECTION("a Partial tensor is refused with the fix") {
    auto partial = dtensor::from_local(at::ones({2}), flat, {Partial()}, std::vector<int64_t>{2});
    CHECK_THROWS_WITH(
        checkpoint::save(root, "bad", {{"p", partial}}),
        Catch::Matchers::Contains("'p'") && Catch::Matchers::Contains("redistribute it"));
  }
}

TEST_CASE("checkpoint: a LLaMA saved under a TP plan loads replicated and into a plain model",
          "[checkpoint][world2][world4]") {
  const int w = dist::world_size();
  const auto root = shared_root("llama");
  auto tp = mesh::DeviceMesh::init({{"tp", w}});
  auto dp = mesh::DeviceMesh::init({{"dp", w}});
  const auto tp_plan =
      plan::Plan::from_json_file(testing::repo_file("configs/plans/llama_tp.json"));
  auto saved = planned_llama(1, tp_plan, tp);
  const auto want = testing::full_params(*saved);
  const auto folder = checkpoint::save(root, "step-00000005", params_of(*saved));

  auto replicated = planned_llama(2, testing::replicate_all({"dp"}), dp);
  checkpoint::load(folder, params_of(*replicated));
  random::manual_seed(3);
  models::Llama plain(testing::tiny_llama(16));  // libtorch's init, plain tensors
  checkpoint::load(folder, params_of(*plain));
  auto retp = planned_llama(4, tp_plan, tp);
  const auto fresh = testing::full_params(*retp);
  checkpoint::load(folder, params_of(*retp));

  const auto got_rep = testing::full_params(*replicated), got_tp = testing::full_params(*retp);
  for (const auto& [k, v] : want) {
    INFO(k);
    CHECK(got_rep.at(k).equal(v));
    CHECK(got_tp.at(k).equal(v));
    CHECK(plain->named_parameters()[k].equal(v));
    if (k.find("norm") == std::string::npos)
      CHECK_FALSE(fresh.at(k).equal(v));  // the load did something
  }
}
