// The timeline's cost at 2 ranks (Gloo on CPU, one thread per rank) on llama_tiny: step time
// with spans recorded vs not, paired in alternating blocks of steps inside one run (ABBA, so a
// drift of the shared machine cancels), under DP=2 or TP=2; then one real window's size
// (merged Chrome trace bytes and spans per step) and its end-of-window cost (drain, gather to
// rank 0, merge, JSON). Run from the repository root:
//   build/apps/vescale-run --nproc-per-node 2 -- build/bench/timeline_bench --mesh dp [--rounds 6]
// Prints one JSON line on rank 0 (bench/timeline.sh turns them into bench/results/timeline.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/timeline/recorder.h"
#include "vescale/timeline/trace.h"
#include "vescale/train/trainer.h"

using namespace vescale;

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_dim = "dp";
  int rounds = 6, steps = 3, warmup = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--mesh") mesh_dim = argv[i + 1];
    if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (k == "--steps") steps = std::atoi(argv[i + 1]);
  }
  at::set_num_threads(1);
  dist::init({.device = "cpu"});
  // The window is never reached through step(): the config only installs the block hooks; the
  // bench switches recording on and off itself.
  auto cfg = train::Config::from_file(
      VESCALE_SOURCE_DIR "/configs/llama_tiny.json",
      {"train.steps=100000", "log.metrics_jsonl=\"\"", "log.timeline.steps=\"100000\""});
  cfg.parallel.mesh = {{mesh_dim, 2}};
  if (mesh_dim == "tp") cfg.parallel.plan = VESCALE_SOURCE_DIR "/configs/plans/llama_tp.json";
  train::Trainer t(cfg, mesh::DeviceMesh::init({{mesh_dim, 2}}));
  int64_t step = 0;
  for (int w = 0; w < warmup; ++w) t.step(step++);

  std::vector<double> on_ms, off_ms;
  auto block = [&](bool on) {
    dist::barrier();
    timeline::set_enabled(on);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) t.step(step++);
    const double ms = ms_since(t0) / steps;
    timeline::set_enabled(false);
    timeline::drain();
    (on ? on_ms : off_ms).push_back(ms);
  };
  for (int r = 0; r < rounds; ++r) {
    const bool first_on = r % 2 == 1;  // ABBA over pairs of rounds
    block(first_on);
    block(!first_on);
  }

  // One real window: its spans, trace bytes and end-of-window cost.
  timeline::drain();
  timeline::set_enabled(true);
  for (int s = 0; s < steps; ++s) t.step(step++);
  timeline::set_enabled(false);
  dist::barrier();
  const auto t0 = std::chrono::steady_clock::now();
  timeline::RankTrace mine;
  mine.rank = dist::rank();
  mine.label = "rank " + std::to_string(mine.rank);
  mine.window_end_ns = INT64_MAX;
  mine.spans = timeline::drain();
  const size_t my_spans = mine.spans.spans.size();
  const auto all = dist::gather_text(timeline::serialize(mine), 0);
  if (dist::rank() == 0) {
    std::vector<timeline::RankTrace> traces;
    for (const auto& b : all) traces.push_back(timeline::deserialize(b));
    const std::string json = timeline::chrome_trace_json(timeline::merge(traces));
    const double end_ms = ms_since(t0);
    const double on = bench::median(on_ms), off = bench::median(off_ms);
    nlohmann::ordered_json j{{"mesh", mesh_dim + "=2"},
                             {"steps_per_block", steps},
                             {"rounds", rounds},
                             {"on_step_ms", on},
                             {"off_step_ms", off},
                             {"overhead", on / off - 1.0},
                             {"spans_per_step_rank0", static_cast<double>(my_spans) / steps},
                             {"trace_bytes_per_step", static_cast<double>(json.size()) / steps},
                             {"window_end_ms", end_ms}};
    std::printf("%s\n", j.dump().c_str());
  }
  dist::shutdown();
  return 0;
}
