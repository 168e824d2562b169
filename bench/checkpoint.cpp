// Checkpoint speed at 4 ranks (Gloo on CPU, one thread per rank) on a state of --mb MB (default
// 512) in fp32 tensors sharded over the 4 ranks: a synchronous save (stage, write, fsync, commit)
// against an asynchronous one, whose training stall is the time begin() takes (the host copy;
// the writer thread does the rest while training would go on); a resharding load onto a
// dp=2 x tp=2 mesh (each rank reads half the rows: two of the four files' chunks); and each
// phase's peak host memory per rank above what it held before (VmHWM, reset per phase).
//   build/apps/vescale-run --nproc-per-node 4 -- build/bench/checkpoint_bench --dir /tmp/ck [--mb
//   512]
// Prints one JSON line on rank 0 (bench/checkpoint.sh turns them into bench/results/checkpoint.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vescale/checkpoint/distributed_checkpoint.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"

using namespace vescale;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Peak resident memory since the last reset, in MB (Linux: VmHWM; "5" to clear_refs resets it).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }
double peak_mb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}
double rss_mb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

double max_over_ranks(double v) {
  return static_cast<double>(dist::all_max(static_cast<int64_t>(v * 1000.0))) / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/vescale_checkpoint_bench";
  int64_t mb = 512;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--dir") dir = argv[i + 1];
    if (k == "--mb") mb = std::atoll(argv[i + 1]);
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  at::set_num_threads(1);
  dist::init({.device = "cpu"});
  const int rank = dist::rank();
  auto flat = mesh::DeviceMesh::init({{"x", 4}});
  auto grid = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  // 32 MB tensors [8192, 1024], sharded by rows.
  const int64_t rows = 8192, cols = 1024, n = std::max<int64_t>(1, mb / 32);
  checkpoint::StateDict state;
  for (int64_t i = 0; i < n; ++i) {
    auto local = at::randn({rows / 4, cols});
    state["w" + std::to_string(100 + i)] =
        dtensor::from_local(local, flat, {dtensor::Shard(0)}, std::vector<int64_t>{rows, cols});
  }
  const double total_mb = static_cast<double>(n * rows * cols * 4) / (1 << 20);
  if (rank == 0) std::filesystem::remove_all(dir);
  dist::barrier();

  std::vector<double> sync_ms, stall_ms, async_ms, load_ms;
  double sync_peak = 0, async_peak = 0, load_peak = 0;
  for (int r = 0; r < rounds; ++r) {
    // Synchronous: begin + commit.
    dist::barrier();
    double base = rss_mb();
    reset_peak();
    auto t0 = std::chrono::steady_clock::now();
    checkpoint::save(dir, "sync-" + std::to_string(r), state);
    sync_ms.push_back(max_over_ranks(ms_since(t0)));
    sync_peak = std::max(sync_peak, max_over_ranks(peak_mb() - base));

    // Asynchronous: training waits for begin() only; commit() after the writers are done.
    dist::barrier();
    base = rss_mb();
    reset_peak();
    t0 = std::chrono::steady_clock::now();
    checkpoint::AsyncSave saver;
    saver.begin(dir, "async-" + std::to_string(r), state);
    stall_ms.push_back(max_over_ranks(ms_since(t0)));
    saver.wait();  // the background write (training would run meanwhile)
    saver.commit();
    async_ms.push_back(max_over_ranks(ms_since(t0)));
    async_peak = std::max(async_peak, max_over_ranks(peak_mb() - base));

    // Resharding load: half the rows per rank (tp), replicated over dp.
    checkpoint::StateDict target;
    for (const auto& [k, t] : state)
      target[k] = dtensor::from_local(at::empty({rows / 2, cols}), grid,
                                      {dtensor::Replicate(), dtensor::Shard(0)},
                                      std::vector<int64_t>{rows, cols});
    dist::barrier();
    base = rss_mb();
    reset_peak();
    const auto read0 = checkpoint::io_counters().bytes_read;
    t0 = std::chrono::steady_clock::now();
    checkpoint::load(dir + "/sync-" + std::to_string(r), target);
    load_ms.push_back(max_over_ranks(ms_since(t0)));
    load_peak = std::max(load_peak, max_over_ranks(peak_mb() - base));
    const double read_mb =
        static_cast<double>(checkpoint::io_counters().bytes_read - read0) / (1 << 20);
    if (r == 0 && rank == 0) std::fprintf(stderr, "load: rank 0 read %.1f MB\n", read_mb);
    // Check the load: rank 0's rows 0..rows/2 are ranks 0 and 1's saved shards.
    if (r == 0) {
      const auto& got = dtensor::to_local(target.begin()->second);
      const auto want = dtensor::full_tensor(state.begin()->second);
      const int64_t tp = grid.coordinate("tp");
      if (!got.equal(want.narrow(0, tp * rows / 2, rows / 2))) {
        std::fprintf(stderr, "checkpoint_bench: the load does not match the save\n");
        return 1;
      }
    }
    target.clear();
    if (rank == 0) {
      std::filesystem::remove_all(dir + "/sync-" + std::to_string(r));
      std::filesystem::remove_all(dir + "/async-" + std::to_string(r));
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (rank == 0) {
    const double s = median(sync_ms), st = median(stall_ms), a = median(async_ms),
                 l = median(load_ms);
    nlohmann::ordered_json j{{"state_mb", total_mb},
                             {"rounds", rounds},
                             {"sync_save_ms", s},
                             {"sync_save_gb_s", total_mb / 1024.0 / (s / 1000.0)},
                             {"async_stall_ms", st},
                             {"async_total_ms", a},
                             {"async_save_gb_s", total_mb / 1024.0 / (a / 1000.0)},
                             {"stall_over_sync", st / s},
                             {"load_ms", l},
                             {"load_gb_s", total_mb / 2 / 1024.0 / (l / 1000.0) * 4},
                             {"sync_peak_mb_per_rank", sync_peak},
                             {"async_peak_mb_per_rank", async_peak},
                             {"load_peak_mb_per_rank", load_peak},
                             {"shard_mb_per_rank", total_mb / 4}};
    std::printf("%s\n", j.dump().c_str());
  }
  if (rank == 0) std::filesystem::remove_all(dir);
  dist::shutdown();
  return 0;
}
