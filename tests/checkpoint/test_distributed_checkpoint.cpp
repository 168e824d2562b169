// Sharded checkpoints in one process (plain tensors; the multi-rank resharding cases are in
// test_checkpoint_resharding.cpp): the round trip, the on-disk layout, staging at begin(),
// "latest", keep, a leftover unfinished save, and the errors for corrupt or mismatched input.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/checkpoint/root_lock.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/common/check.h"

namespace ckpt = vescale::checkpoint;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {
fs::path fresh_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("vescale_dcp_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

ckpt::StateDict sample_state() {
  return {{"w", at::randn({5, 3})},
          {"b", at::randn({3}, at::kDouble)},
          {"step", at::scalar_tensor(7, at::kLong)},
          {"half", at::randn({4}).to(at::kBFloat16)}};
}

ckpt::StateDict zeros_like_all(const ckpt::StateDict& s) {
  ckpt::StateDict out;
  for (const auto& [k, v] : s) out[k] = at::zeros_like(v);
  return out;
}
}  // namespace

TEST_CASE("checkpoint round trip of plain tensors, with metadata and latest", "[checkpoint]") {
  const auto root = fresh_dir("round");
  const auto state = sample_state();
  const auto folder =
      ckpt::save(root.string(), "step-00000001", state, R"({"step": 1, "note": "x"})");
  CHECK(folder == (root / "step-00000001").string());
  CHECK(ckpt::latest(root.string()) == folder);
  CHECK(fs::exists(root / "step-00000001" / "index.json"));
  CHECK(fs::exists(root / "step-00000001" / "rank-00000.safetensors"));
  CHECK_FALSE(fs::exists(root / "step-00000001.tmp"));

  auto back = zeros_like_all(state);
  ckpt::load(folder, back);
  for (const auto& [k, v] : state) {
    INFO(k);
    CHECK(back.at(k).equal(v));
  }
  const auto info = ckpt::read_info(folder);
  CHECK(info.tensors.at("w").shape == std::vector<int64_t>{5, 3});
  CHECK(info.tensors.at("half").dtype == at::kBFloat16);
  CHECK(nlohmann::json::parse(info.metadata).at("note") == "x");

  // The rank file is a plain safetensors file with one chunk per tensor.
  auto file = ckpt::load_safetensors((root / "step-00000001" / "rank-00000.safetensors").string());
  CHECK(file.size() == state.size());
  CHECK(file.at("w").equal(state.at("w")));
}

TEST_CASE("checkpoint begin() stages the values: later updates don't leak into the save",
          "[checkpoint]") {
  const auto root = fresh_dir("staging");
  at::Tensor w = at::arange(6, at::kFloat);
  const at::Tensor before = w.clone();
  ckpt::AsyncSave saver;
  saver.begin(root.string(), "step-00000002", {{"w", w}});
  CHECK(saver.pending());
  w.add_(100);                                           // training goes on while the writer runs
  CHECK_FALSE(ckpt::latest(root.string()).has_value());  // not visible before commit
  saver.commit();
  CHECK_FALSE(saver.pending());
  ckpt::StateDict back{{"w", at::zeros({6})}};
  ckpt::load(*ckpt::latest(root.string()), back);
  CHECK(back.at("w").equal(before));
}

TEST_CASE("checkpoint keep, replacing a folder, and a leftover unfinished save", "[checkpoint]") {
  const auto root = fresh_dir("keep");
  // A crash mid-save left a .tmp folder: it is neither latest nor in the way.
  fs::create_directories(root / "step-00000009.tmp");
  std::ofstream(root / "step-00000009.tmp" / "rank-00000.safetensors") << "half a file";
  for (int s = 1; s <= 4; ++s) {
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08d", s);
    ckpt::save(root.string(), name, {{"x", at::full({2}, static_cast<double>(s))}}, "{}",
               /*keep=*/2);
  }
  CHECK_FALSE(fs::exists(root / "step-00000001"));
  CHECK_FALSE(fs::exists(root / "step-00000002"));
  CHECK(fs::exists(root / "step-00000003"));
  CHECK(ckpt::latest(root.string()) == (root / "step-00000004").string());
  // Saving the same name again replaces it whole.
  ckpt::save(root.string(), "step-00000004", {{"x", at::full({2}, 40.0)}});
  ckpt::StateDict back{{"x", at::zeros({2})}};
  ckpt::load((root / "step-00000004").string(), back);
  CHECK(back.at("x").equal(at::full({2}, 40.0)));
  CHECK_FALSE(fs::exists(root / "step-00000004.old"));
}

TEST_CASE("checkpoint run ids: keep prunes only its own run, stale saves go, abort leaves nothing",
          "[checkpoint]") {
  const auto root = fresh_dir("runs");
  CHECK_FALSE(ckpt::has_checkpoints(root.string()));
  CHECK(ckpt::remove_stale_saves(root.string()).empty());  // nothing committed: nothing is stale
  auto save = [&](const char* name, const std::string& run, int64_t keep) {
    ckpt::AsyncSave s;
    s.begin(root.string(), name, {{"x", at::ones({2})}});
    s.commit(keep, run);
  };
  save("step-00000002", "old", 0);
  save("step-00000004", "old", 0);
  CHECK(ckpt::has_checkpoints(root.string()));
  CHECK(ckpt::read_info((root / "step-00000002").string()).run_id == "old");
  // Another run in the same folder, keep=1: only its own older checkpoint goes.
  save("step-00000001", "new", 1);
  save("step-00000003", "new", 1);
  CHECK(fs::exists(root / "step-00000002"));
  CHECK(fs::exists(root / "step-00000004"));
  CHECK_FALSE(fs::exists(root / "step-00000001"));
  CHECK(ckpt::latest(root.string()) == (root / "step-00000003").string());
  CHECK(ckpt::read_info((root / "step-00000003").string()).run_id == "new");

  // An unfinished save older than the newest checkpoint is removed; a newer one may still be
  // written.
  fs::create_directories(root / "step-00000005.tmp");
  fs::last_write_time(root / "step-00000005.tmp",
                      fs::file_time_type::clock::now() - std::chrono::hours(24));
  fs::create_directories(root / "step-00000006.tmp");
  fs::last_write_time(root / "step-00000006.tmp",
                      fs::file_time_type::clock::now() + std::chrono::hours(1));
  CHECK(ckpt::remove_stale_saves(root.string()) ==
        std::vector<std::string>{(root / "step-00000005.tmp").string()});
  CHECK(fs::exists(root / "step-00000006.tmp"));

  // abort(): nothing becomes visible, the unfinished folder is gone.
  ckpt::AsyncSave s;
  s.begin(root.string(), "step-00000007", {{"x", at::ones({2})}});
  s.abort();
  CHECK_FALSE(s.pending());
  CHECK_FALSE(fs::exists(root / "step-00000007.tmp"));
  CHECK_FALSE(fs::exists(root / "step-00000007"));
  CHECK(ckpt::latest(root.string()) == (root / "step-00000003").string());
}

TEST_CASE("checkpoint errors name the tensor, the file and the fix", "[checkpoint]") {
  const auto root = fresh_dir("errors");
  const auto folder = ckpt::save(root.string(), "step-00000001", sample_state());

  SECTION("a tensor the checkpoint lacks") {
    ckpt::StateDict want{{"nope", at::zeros({1})}};
    CHECK_THROWS_WITH(ckpt::load(folder, want), Contains("no tensor 'nope'"));
  }
  SECTION("another shape") {
    ckpt::StateDict want{{"w", at::zeros({3, 5})}};
    CHECK_THROWS_WITH(ckpt::load(folder, want),
                      Contains("'w' has shape [5, 3]") && Contains("[3, 5] here"));
  }
  SECTION("another dtype") {
    ckpt::StateDict want{{"b", at::zeros({3}, at::kFloat)}};
    CHECK_THROWS_WITH(ckpt::load(folder, want), Contains("'b' is Double"));
  }
  SECTION("a flipped byte fails the CRC-32") {
    const auto file = fs::path(folder) / "rank-00000.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(file) - 3));
    f.put('\x5a');
    f.close();
    auto want = zeros_like_all(sample_state());
    CHECK_THROWS_WITH(ckpt::load(folder, want), Contains("is corrupt") && Contains("CRC-32"));
  }
  SECTION("no index") {
    ckpt::StateDict want;
    CHECK_THROWS_WITH(ckpt::load(root.string(), want), Contains("has no index.json"));
    CHECK_FALSE(ckpt::latest((root / "elsewhere").string()).has_value());
  }
  SECTION("latest pointing nowhere") {
    std::ofstream(root / "latest") << "step-00000077\n";
    CHECK_THROWS_WITH(ckpt::latest(root.string()),
                      Contains("step-00000077") && Contains("no index.json"));
  }
  SECTION("bad metadata") {
    CHECK_THROWS_WITH(ckpt::save(root.string(), "x", sample_state(), "{not json"),
                      Contains("metadata is not valid JSON"));
  }
}

TEST_CASE("flat_range_boxes cuts a flat range into boxes that hold exactly its elements, in order",
          "[checkpoint]") {
  at::manual_seed(3);
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{7}, {3, 5}, {2, 3, 4}, {4, 1, 3, 2}, {}}) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const at::Tensor t = at::arange(numel, at::kLong).view(shape);
    for (int trial = 0; trial < 40; ++trial) {
      int64_t a = at::randint(0, numel + 1, {1}).item<int64_t>(),
              b = at::randint(0, numel + 1, {1}).item<int64_t>();
      if (a > b) std::swap(a, b);
      INFO("shape " << at::IntArrayRef(shape) << " range [" << a << ", " << b << ")");
      const auto boxes = ckpt::flat_range_boxes(shape, a, b);
      CHECK(boxes.size() <= std::max<size_t>(1, 2 * shape.size() - 1));
      int64_t next = a;
      for (const auto& box : boxes) {
        at::Tensor v = t;
        for (size_t d = 0; d < shape.size(); ++d)
          v = v.narrow(static_cast<int64_t>(d), box.offsets[d], box.shape[d]);
        CHECK(box.flat_begin == next);
        CHECK(v.reshape({-1}).equal(at::arange(next, next + v.numel(), at::kLong)));
        next += v.numel();
      }
      CHECK(next == b);
    }
  }
  CHECK_THROWS_WITH(ckpt::flat_range_boxes({2, 3}, 4, 7), Contains("not inside"));
}

namespace {
std::string slurp_file(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
}  // namespace

TEST_CASE("a root's lock: shared within a process, refused to a live holder, taken from a dead one",
          "[checkpoint]") {
  const fs::path root = fs::temp_directory_path() / ("vescale_lock_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string lock = (root / ckpt::RootLock::kFile).string();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  {
    ckpt::RootLock a(root.string(), "first");
    CHECK_THAT(slurp_file(lock), Contains("host=" + std::string(host) +
                                          " pid=" + std::to_string(::getpid()) + " started=") &&
                                     Contains(" who=first"));
    {
      ckpt::RootLock b(root.string(), "second");  // this process's: shared
    }
    CHECK(fs::exists(lock));  // the first still holds it
  }
  CHECK_FALSE(fs::exists(lock));
  // A live process on this host named in the file (pid 1 always lives): refused, file untouched.
  const std::string live =
      "host=" + std::string(host) + " pid=1 started=2026-01-01T00:00:00Z who=x\n";
  std::ofstream(lock) << live;
  CHECK_THROWS_WITH(ckpt::RootLock(root.string(), "third"),
                    Contains("is in use by another run (its lock file names a live process or "
                             "another host: host=") &&
                        Contains("pid=1 ") && Contains("delete " + lock));
  CHECK(slurp_file(lock) == live);
  // Another host's: refused the same way (its process cannot be checked from here).
  std::ofstream(lock) << "host=elsewhere-node pid=12 started=2026-01-01T00:00:00Z who=x\n";
  CHECK_THROWS_WITH(ckpt::RootLock(root.string(), "third"), Contains("host=elsewhere-node"));
  // A dead process of this host: taken over, and the caller is told what was there.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = "host=" + std::string(host) + " pid=" + std::to_string(child) +
                           " started=2026-01-01T00:00:00Z who=x";
  std::ofstream(lock) << dead << "\n";
  {
    ckpt::RootLock d(root.string(), "fourth");
    CHECK(d.took_over() == dead);
    CHECK_THAT(slurp_file(lock), Contains(" who=fourth"));
  }
  fs::remove_all(root);
}
