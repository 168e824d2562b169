// Mixture of experts at 4 ranks (Gloo on CPU, one thread per rank), side by side on one Mixtral:
//   replicated experts: dp=4, every weight replicated (each rank runs all experts on its tokens);
//   EP=4: configs/plans/mixtral_ep.json, E/4 experts per rank, tokens moved by all-to-all;
// paired in alternating rounds; with the token all-to-alls' calls and bytes per step. Then, on
// rank 0 alone, kernels::grouped_mm against a per-expert loop of linear calls (forward and
// backward) on the same shapes. Run from the repository root:
//   build/apps/vescale-run --nproc-per-node 4 -- build/bench/moe_bench [--rounds 5]
// Prints one JSON line per figure on rank 0 (bench/moe.sh turns them into bench/results/moe.md).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/process_group.h"
#include "vescale/dist/world.h"
#include "vescale/kernels/grouped_mm.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/expert/expert_parallel.h"
#include "vescale/train/trainer.h"

using namespace vescale;

namespace {

struct Args {
  int rounds = 5, steps = 3, warmup = 2;
  int dim = 128, ffn = 512, experts = 8, top_k = 2, layers = 2, batch = 4, seq = 64;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--rounds") a.rounds = v;
    else if (k == "--steps") a.steps = v;
    else if (k == "--dim") a.dim = v;
    else if (k == "--ffn") a.ffn = v;
    else if (k == "--experts") a.experts = v;
    else if (k == "--layers") a.layers = v;
    else if (k == "--batch") a.batch = v;
    else if (k == "--seq") a.seq = v;
  }
  return a;
}

train::Config config(const Args& a, const std::string& plan, const mesh::MeshDims& dims) {
  std::vector<std::string> o{
      "model.dim=" + std::to_string(a.dim),        "model.ffn_dim=" + std::to_string(a.ffn),
      "model.n_experts=" + std::to_string(a.experts), "model.top_k=" + std::to_string(a.top_k),
      "model.n_layers=" + std::to_string(a.layers), "model.max_seq_len=" + std::to_string(a.seq),
      "train.batch_size=" + std::to_string(a.batch), "train.seq_len=" + std::to_string(a.seq),
      "train.steps=1000",                            "log.metrics_jsonl=\"\""};
  auto c = train::Config::from_file(VESCALE_SOURCE_DIR "/configs/mixtral_tiny.json", o);
  if (!plan.empty()) c.parallel.plan = VESCALE_SOURCE_DIR "/configs/plans/" + plan;
  c.parallel.mesh = dims;
  return c;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  at::set_num_threads(1);
  dist::init({.device = "cpu"});
  auto rep_mesh = mesh::DeviceMesh::init({{"dp", 4}});
  auto ep_mesh = mesh::DeviceMesh::init({{"ep", 4}});
  train::Trainer replicated(config(a, "", {{"dp", 4}}), rep_mesh);
  train::Trainer ep(config(a, "mixtral_ep.json", {{"ep", 4}}), ep_mesh);
  int64_t step_rep = 0, step_ep = 0;
  for (int w = 0; w < a.warmup; ++w) replicated.step(step_rep++), ep.step(step_ep++);

  std::vector<double> rep_ms, ep_ms;
  int64_t a2a = 0, bytes = 0, rows = 0, collectives = 0;
  for (int r = 0; r < a.rounds; ++r) {
    dist::barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < a.steps; ++s) replicated.step(step_rep++);
    rep_ms.push_back(ms_since(t0) / a.steps);
    dist::barrier();
    parallel::expert::reset_dispatch_stats();
    const auto before = dist::collective_stats();
    t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < a.steps; ++s) ep.step(step_ep++);
    ep_ms.push_back(ms_since(t0) / a.steps);
    const auto st = parallel::expert::dispatch_stats();
    a2a = st.all_to_alls / a.steps, bytes = st.bytes_sent / a.steps, rows = st.rows_sent / a.steps;
    collectives = (dist::collective_stats().all_to_all - before.all_to_all) / a.steps;
  }

  // grouped_mm vs a per-expert loop: one layer's expert matmuls for this rank's routed rows.
  std::vector<double> grouped_ms, loop_ms;
  const int64_t M = static_cast<int64_t>(a.batch) * a.seq * a.top_k;
  std::vector<int64_t> counts(a.experts, M / a.experts);
  counts[0] += M - (M / a.experts) * a.experts;
  if (dist::rank() == 0) {
    auto x = at::randn({M, a.dim}).set_requires_grad(true);
    auto w = at::randn({a.experts, a.ffn, a.dim}).set_requires_grad(true);
    for (int r = 0; r < a.rounds * 4; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      vescale::kernels::grouped_mm(x, w, counts).sum().backward();
      grouped_ms.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      std::vector<at::Tensor> ys;
      int64_t start = 0;
      for (int e = 0; e < a.experts; ++e) {
        ys.push_back(at::linear(x.narrow(0, start, counts[e]), w[e]));
        start += counts[e];
      }
      at::cat(ys).sum().backward();
      loop_ms.push_back(ms_since(t0));
    }
  }
  if (dist::rank() == 0) {
    const double rep = bench::median(rep_ms), epm = bench::median(ep_ms);
    const double g = bench::median(grouped_ms), l = bench::median(loop_ms);
    nlohmann::json j{{"ranks", 4},
                     {"model", {{"dim", a.dim}, {"ffn", a.ffn}, {"experts", a.experts},
                                {"top_k", a.top_k}, {"layers", a.layers}, {"batch", a.batch},
                                {"seq", a.seq}}},
                     {"rounds", a.rounds},
                     {"steps_per_round", a.steps},
                     {"replicated_step_ms", rep},
                     {"ep_step_ms", epm},
                     {"ep_over_replicated", epm / rep},
                     {"token_all_to_alls_per_step", a2a},
                     {"all_to_alls_per_step", collectives},
                     {"rows_sent_per_step", rows},
                     {"bytes_sent_per_step", bytes},
                     {"grouped_mm_ms", g},
                     {"loop_ms", l},
                     {"grouped_over_loop", g / l},
                     {"grouped_rows", M}};
    std::printf("%s\n", j.dump().c_str());
  }
  dist::barrier();
  return 0;
}
