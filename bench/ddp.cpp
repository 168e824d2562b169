// Step time of gradient reduction strategies on a small LLaMA, side by side:
//   DP=world:        per-parameter all-reduce | buckets after backward | buckets overlapped
//   DP=2 x TP+SP=2:  per-parameter | overlapped, one collective per dim | overlapped, N-D fused
//   DP=world, ZeRO:  overlapped buckets with ZeRO 1, 2, 3 (parallel::ShardedAdamW)
// plus the collectives and bytes each sends per step and the peak memory per rank. Run with 4 ranks
// from the repository root:
//   build/apps/vescale-run --nproc-per-node 4 -- build/bench/ddp
// Rank 0 writes bench/results/ddp.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "vescale/models/llama/llama.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/parallel/grad_reduce.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/parallel/grad_layout.h"
#include "vescale/parallel/sharded_adamw.h"
#include "vescale/parallel/sharded_parameters.h"
#include "vescale/kernels/host_memory.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallelize.h"
#include "vescale/random/random.h"

using namespace vescale;

namespace {

constexpr int64_t kBatch = 8, kSeq = 64, kWarmup = 2, kSteps = 10;
constexpr double kBucketMb = 2;

vescale::models::LlamaOptions bench_llama() {
  vescale::models::LlamaOptions o;
  o.vocab_size = 512;
  o.dim = 256;
  o.n_layers = 4;
  o.n_heads = 8;
  o.n_kv_heads = 4;
  o.ffn_dim = 688;
  o.max_seq_len = kSeq;
  return o;
}

struct Result {
  std::string mesh, mode;
  double median_ms = 0;
  parallel::ReduceStats stats;  // per step
  int64_t buckets = 0;
  int64_t peak_bytes =
      0;  // rank 0's peak over the timed steps, counting from before the model was built
};

// This rank's rows of a batch every rank holds (split over dp).
at::Tensor input(const at::Tensor& full, const mesh::DeviceMesh& mesh) {
  dtensor::Placements pl(mesh.ndim(), dtensor::Replicate());
  for (int64_t d = 0; d < mesh.ndim(); ++d)
    if (mesh.dim_names()[d] == "dp") pl[d] = dtensor::Shard(0);
  return dtensor::distribute_tensor(full, mesh, pl);
}

// A GradReducer's layout and options.
struct Reduction {
  double bucket_mb = 25;
  bool fused = true;
  bool overlap = true;
  int zero = 0;
};

// mode: "per_param", or a GradReducer with these options.
Result run(const std::string& mesh_label, const mesh::DeviceMesh& mesh, const plan::Plan& plan,
           const std::string& mode, Reduction opts) {
  const auto o = bench_llama();
  kernels::reset_peak_memory();
  const int64_t base = kernels::memory_stats().current;
  random::manual_seed(1);
  vescale::models::Llama model(o);
  plan::parallelize(*model, plan, mesh, {.init = [&] { model->init_weights(); }});
  std::unique_ptr<parallel::GradLayout> layout;
  std::unique_ptr<parallel::GradReducer> reducer;
  std::unique_ptr<parallel::ShardedParameters> sharded;
  if (mode != "per_param") {
    layout = std::make_unique<parallel::GradLayout>(
        *model, mesh, plan,
        parallel::GradLayoutOptions{.bucket_mb = opts.bucket_mb, .fused = opts.fused,
                                    .zero = opts.zero,
                                    .unit_pattern = opts.zero >= 3 ? "layers.*" : "",
                                    .dims = {}});
    reducer = std::make_unique<parallel::GradReducer>(*layout,
                                                      parallel::GradReducerOptions{opts.overlap});
    if (opts.zero >= 3) sharded = std::make_unique<parallel::ShardedParameters>(*layout);
  }
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  std::unique_ptr<parallel::ShardedAdamW> zero;
  if (opts.zero >= 1) {
    optim::NamedParams named;
    for (auto& item : model->named_parameters()) named.emplace_back(item.key(), item.value());
    zero = std::make_unique<parallel::ShardedAdamW>(
        *reducer, sharded.get(), std::vector<optim::ParamGroup>{{named, 0.0}},
        optim::AdamWOptions{.lr = 1e-3});
  }
  const int64_t global_batch = kBatch * (mesh.dim_names()[0] == "dp" ? mesh.size("dp") : 1);
  std::vector<double> ms;
  Result r;
  r.mesh = mesh_label;
  r.mode = mode;
  for (int64_t s = 0; s < kWarmup + kSteps; ++s) {
    auto full = at::randint(o.vocab_size, {global_batch, kSeq + 1}, at::kLong);
    auto x = input(full.slice(1, 0, kSeq).contiguous(), mesh);
    auto y = input(full.slice(1, 1, kSeq + 1).contiguous(), mesh);
    if (s == kWarmup)
      kernels::reset_peak_memory();  // steady state, after the first step's allocations
    dist::world().barrier().wait();
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    if (zero) zero->zero_grad();
    at::Tensor loss =
        at::cross_entropy_loss(vescale::nn::call(model, x).flatten(0, 1), y.flatten(0, 1));
    loss.backward();
    if (reducer) {
      r.stats = reducer->finish();
    } else {
      r.stats.collectives = parallel::reduce_gradients(*model);
    }
    if (zero) {
      zero->step();
    } else {
      opt.step();
    }
    if (s >= kWarmup)
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  if (layout) r.buckets = static_cast<int64_t>(layout->buckets().size());
  r.peak_bytes = kernels::memory_stats().peak - base;
  zero.reset();
  sharded.reset();
  reducer.reset();
  layout.reset();
  plan::remove_forward_hooks(*model);
  return r;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int main() {
  dist::init({.device = "cpu"});
  at::set_num_threads(1);
  kernels::track_memory();
  const int world = dist::world_size();
  std::vector<Result> results;
  {
    auto mesh = mesh::DeviceMesh::init({{"dp", world}});
    plan::Plan plan({"dp"});
    plan.shard("*", {dtensor::Replicate()});
    const std::string label = "dp=" + std::to_string(world);
    results.push_back(run(label, mesh, plan, "per_param", {}));
    results.push_back(run(label, mesh, plan, "bucketed",
                          {.bucket_mb = kBucketMb, .fused = true, .overlap = false}));
    results.push_back(run(label, mesh, plan, "overlapped",
                          {.bucket_mb = kBucketMb, .fused = true, .overlap = true}));
    for (int z : {1, 2, 3})
      results.push_back(run(label, mesh, plan, "overlapped, ZeRO-" + std::to_string(z),
                            {.bucket_mb = kBucketMb, .fused = true, .overlap = true, .zero = z}));
  }
  if (world == 4) {
    auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
    const auto plan = plan::Plan::from_json_file("configs/plans/llama_dp_tp_sp.json");
    const std::string label = "dp=2 x tp+sp=2";
    results.push_back(run(label, mesh, plan, "per_param", {}));
    results.push_back(run(label, mesh, plan, "overlapped, unfused",
                          {.bucket_mb = kBucketMb, .fused = false, .overlap = true}));
    results.push_back(run(label, mesh, plan, "overlapped, N-D fused",
                          {.bucket_mb = kBucketMb, .fused = true, .overlap = true}));
  }
  if (dist::rank() == 0) {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    const auto o = bench_llama();
    std::string md = "# Gradient reduction: per parameter vs buckets vs overlap vs N-D fused\n\n";
    md += "Machine: " + cpu_name() + ", " + std::to_string(std::thread::hardware_concurrency()) +
          " hardware threads (shared with other jobs), " + std::to_string(world) +
          " Gloo ranks on one host, 1 intra-op thread each. Date: " + date + ". libtorch " +
          TORCH_VERSION_STRING + ".\n\n";
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "Model: LLaMA dim %lld, %lld layers, ffn %lld, vocab %lld (fp32); %lld x %lld "
                  "tokens per dp rank; "
                  "AdamW. Buckets of %.0f MiB. Median of %lld steps after %lld warm-up steps (rank "
                  "0's clock, "
                  "ranks aligned by a barrier before each step). Run: `build/apps/vescale-run "
                  "--nproc-per-node 4 -- "
                  "build/bench/ddp` from the repository root.\n\n",
                  static_cast<long long>(o.dim), static_cast<long long>(o.n_layers),
                  static_cast<long long>(o.ffn_dim), static_cast<long long>(o.vocab_size),
                  static_cast<long long>(kBatch), static_cast<long long>(kSeq), kBucketMb,
                  static_cast<long long>(kSteps), static_cast<long long>(kWarmup));
    md += buf;
    md +=
        "| mesh | reduction | step ms (median) | vs per-param | buckets | collectives / step | MiB "
        "sent / step | "
        "launched during backward | peak MiB (rank 0) |\n|---|---|---|---|---|---|---|---|---|\n";
    double base = 0;
    for (const auto& r : results) {
      if (r.mode == "per_param") base = r.median_ms;
      std::snprintf(buf, sizeof buf, "| %s | %s | %.1f | %.2fx | %s | %lld | %s | %s | %.1f |\n",
                    r.mesh.c_str(), r.mode.c_str(), r.median_ms, r.median_ms / base,
                    r.mode == "per_param" ? "-" : std::to_string(r.buckets).c_str(),
                    static_cast<long long>(r.stats.collectives),
                    r.mode == "per_param"
                        ? "-"
                        : std::to_string(static_cast<double>(r.stats.bytes) / (1024.0 * 1024.0))
                              .substr(0, 5)
                              .c_str(),
                    r.mode == "per_param" ? "-" : std::to_string(r.stats.overlapped).c_str(),
                    static_cast<double>(r.peak_bytes) / (1024.0 * 1024.0));
      md += buf;
    }
    md +=
        "\nZeRO rows: the collectives are the gradient buckets' (all-reduce for 1, reduce-scatter "
        "for 2 and 3); "
        "the parameter all-gathers (after the step, and for ZeRO-3 before each block's forward and "
        "backward) come on "
        "top. Peak memory: the most bytes held at once during the timed steps by CPU tensors "
        "allocated since the row's model was built (a counting allocator; parameters, gradients, "
        "optimizer state, activations).\n";
    md +=
        "\nPer-param counts are redistributions (one per gradient that needed reducing; a "
        "[Partial, Partial] "
        "norm gradient may take more than one collective inside). Timings on shared CPUs are "
        "noisy: read the "
        "ratios, not the digits.\n";
    std::ofstream("bench/results/ddp.md") << md;
    std::printf("%s", md.c_str());
  }
  dist::shutdown();
  return 0;
}
