// Sharded checkpoints across ranks: what one mesh and set of placements saved loads bitwise
// into any other (and into plain tensors), each distinct shard is written once, and a LLaMA
// saved under a TP plan loads into a replicated or a plain model.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "common/train_util.h"
#include "vescale/models/llama/llama.h"
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

vescale::models::Llama planned_llama(uint64_t seed, const plan::Plan& plan, const mesh::DeviceMesh& mesh) {
  random::manual_seed(seed);
  vescale::models::Llama model(testing::tiny_llama(16));
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
  vescale::models::Llama plain(testing::tiny_llama(16));  // libtorch's init, plain tensors
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

namespace {

// The 8-byte header length and the data offsets of `name` in a safetensors file.
std::pair<uint64_t, uint64_t> data_begin_of(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const auto h = nlohmann::json::parse(header);
  return {n, 8 + n + h.at(name).at("data_offsets").at(0).get<uint64_t>()};
}

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("checkpoint: a resharding load reads only the chunks it needs, each checked by its CRC",
          "[checkpoint][world4]") {
  const auto root = shared_root("lazy");
  at::manual_seed(11);
  const auto a = at::randn({16, 8}), big = at::randn({64, 64}), c = at::randn({4});
  auto flat = mesh::DeviceMesh::init({{"x", 4}});
  const auto before_save = checkpoint::io_counters();
  const auto folder = checkpoint::save(root, "step-00000001",
                                       {{"a", dtensor::distribute_tensor(a, flat, {Shard(0)})},
                                        {"big", dtensor::distribute_tensor(big, flat, {Shard(0)})},
                                        {"c", c}});
  // Durable: this rank's file and its folder synced; rank 0 also the index, the folder's
  // rename, the root and `latest`.
  const auto synced = checkpoint::io_counters().fsyncs - before_save.fsyncs;
  CHECK(synced >= (dist::rank() == 0 ? 7u : 2u));
  const auto index = nlohmann::json::parse(std::ifstream(fs::path(folder) / "index.json"));
  CHECK(index.at("written_by").at("vescale").get<std::string>() == "0.1.0");
  CHECK_FALSE(index.at("written_by").at("git").get<std::string>().empty());
  for (const auto& [name, e] : index.at("tensors").items())
    for (const auto& chunk : e.at("chunks")) CHECK(chunk.contains("crc32"));

  // Loaded at TP=2 on a dp x tp mesh: each rank needs half of 'a' (two of the four chunks) and
  // 'c', not 'big', which the same files hold.
  auto grid = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  const int64_t tp = grid.coordinate("tp");
  auto load_a = [&] {
    checkpoint::StateDict target{
        {"a", dtensor::distribute_tensor(at::zeros({16, 8}), grid, {Replicate(), Shard(0)})},
        {"c", at::zeros({4})}};
    checkpoint::load(folder, target);
    return target;
  };
  const int64_t index_bytes = static_cast<int64_t>(fs::file_size(fs::path(folder) / "index.json"));
  // The files this rank reads: its two chunks' owners, and rank 0's for 'c'.
  std::set<int> owners{0, static_cast<int>(2 * tp), static_cast<int>(2 * tp + 1)};
  int64_t headers = 0;
  for (int r : owners) {
    char file[32];
    std::snprintf(file, sizeof(file), "rank-%05d.safetensors", r);
    headers +=
        8 + static_cast<int64_t>(data_begin_of((fs::path(folder) / file).string(), "a").first);
  }
  dist::world().barrier().wait();
  const auto before = checkpoint::io_counters();
  const auto got = load_a();
  const int64_t read =
      static_cast<int64_t>(checkpoint::io_counters().bytes_read - before.bytes_read);
  CHECK(dtensor::full_tensor(got.at("a")).equal(a));
  CHECK(got.at("c").equal(c));
  const int64_t shards = 8 * 8 * 4 /* half of a */ + 4 * 4 /* c */;
  INFO("rank " << dist::rank() << " read " << read << " bytes; its shards " << shards
               << ", the index " << index_bytes << ", headers " << headers);
  // Reading the files whole would add a quarter of 'big' (4 KiB) per file.
  CHECK(read <= shards + index_bytes + headers);
  CHECK(read >= shards + index_bytes);

  SECTION("a flipped byte in a needed chunk is caught by that chunk's CRC") {
    const std::string file = (fs::path(folder) / "rank-00001.safetensors").string();
    dist::world().barrier().wait();
    if (dist::rank() == 0) flip_byte(file, data_begin_of(file, "a").second + 5);
    dist::world().barrier().wait();
    if (tp == 0) {  // rows 0-7: rank 1's chunk among them
      CHECK_THROWS_WITH(load_a(), Catch::Matchers::Contains("rank-00001.safetensors is corrupt") &&
                                      Catch::Matchers::Contains("the chunk of 'a'"));
    } else {
      CHECK(dtensor::to_local(load_a().at("a")).equal(a.narrow(0, 8, 8)));
    }
  }
  SECTION("a flipped byte in a chunk nobody needs is never read") {
    const std::string file = (fs::path(folder) / "rank-00001.safetensors").string();
    dist::world().barrier().wait();
    if (dist::rank() == 0) flip_byte(file, data_begin_of(file, "big").second + 5);
    dist::world().barrier().wait();
    CHECK(dtensor::full_tensor(load_a().at("a")).equal(a));
  }
  dist::world().barrier().wait();
}
