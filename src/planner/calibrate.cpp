#include "vescale/planner/calibrate.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <algorithm>
#include <vector>
#include <chrono>
#include <cmath>
#include <ctime>

#include "vescale/common/check.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/plan/plan.h"
#include "vescale/models/model.h"
#include "vescale/planner/cost_model.h"
#include "vescale/planner/plan_template.h"
#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/model_input.h"

namespace vescale::planner {
namespace {

using Clock = std::chrono::steady_clock;

void sync(const std::string& device) {
  if (device != "cpu") at::empty({1}, at::TensorOptions().device(device)).cpu();  // drains the stream
}

// How many calls of `f` take at least 50 ms here; under a launcher the most any rank needs, so
// that every rank makes the same calls (`f` may hold collectives: a tensor-parallel block). The
// ranks agree after every call whether another is needed, so even these calls pair up.
template <class F>
int agreed_reps(F& f, const std::string& device) {
  int reps = 0;
  const auto start = Clock::now();
  for (bool more = true; more;) {
    f();
    ++reps;
    sync(device);
    more = dist::all_max(std::chrono::duration<double>(Clock::now() - start).count() < 0.05) > 0;
  }
  return reps;
}

// Seconds per call of `f` over `reps` calls.
template <class F>
double timed_round(F& f, const std::string& device, int reps) {
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  sync(device);
  return std::chrono::duration<double>(Clock::now() - start).count() / reps;
}

// The median of a few timings of `f`, each long enough (at least 50 ms in repeats) to time: the
// steps it predicts are read as medians too, and on a shared machine the best of a few runs is
// a moment the training rarely sees. Under a launcher every rank starts each round together:
// training keeps them all busy at once, so the rates must be what a rank gets beside the others.
template <class F>
double median_seconds(F&& f, const std::string& device) {
  const int reps = agreed_reps(f, device);  // also the warm-up
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    dist::barrier();
    rounds.push_back(timed_round(f, device, reps));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

// The median over rounds of `larger`'s time less `smaller`'s, the two timed back to back in
// each round: a shared machine's speed drifts over seconds, and a difference of two medians
// taken apart carries that drift whole (block_elementwise_rate read 5 to 20 GB/s from one
// machine that way).
template <class F, class G>
double median_difference(F&& larger, G&& smaller, const std::string& device) {
  const int larger_reps = agreed_reps(larger, device), smaller_reps = agreed_reps(smaller, device);
  std::vector<double> rounds;
  for (int round = 0; round < 9; ++round) {
    dist::barrier();
    const double a = timed_round(larger, device, larger_reps);
    rounds.push_back(a - timed_round(smaller, device, smaller_reps));
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

std::string today() {
  char b[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(b, sizeof b, "%Y-%m-%d", std::gmtime(&t));
  return b;
}

}  // namespace

std::pair<double, double> fit_gemm_curve(const std::vector<std::pair<double, double>>& points) {
  VESCALE_CHECK(points.size() >= 2, "calibrate: the GEMM curve needs at least two sizes");
  double best_err = 1e300, best_peak = 0, best_half = 0;
  for (double lg = 3; lg <= 13; lg += 0.01) {
    const double half = std::pow(10.0, lg);
    double num = 0, den = 0;
    for (const auto& [w, r] : points) {
      const double g = w / (w + half);
      num += r * g, den += g * g;
    }
    const double peak = num / den;
    double err = 0;
    for (const auto& [w, r] : points) {
      const double e = (peak * w / (w + half) - r) / r;  // relative: small GEMMs count as much
      err += e * e;
    }
    if (err < best_err) best_err = err, best_peak = peak, best_half = half;
  }
  return {best_peak, best_half};
}

std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& points) {
  VESCALE_CHECK(points.size() >= 2, "calibrate: a line needs at least two points");
  // Least squares on the relative error (weights 1/y^2): the small sizes pin the intercept,
  // the large ones the slope.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    const double w = 1 / (y * y);
    sw += w, sx += w * x, sy += w * y, sxx += w * x * x, sxy += w * x * y;
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / sw;
  VESCALE_CHECK(slope > 0,
                "calibrate: the times do not grow with the size; rerun on a quieter "
                "machine");
  return {std::max(intercept, 0.0), slope};
}

LinkFigures fit_collective(Collective c, const std::vector<std::pair<double, double>>& points,
                           int64_t ranks) {
  VESCALE_CHECK(ranks >= 2, "calibrate: a collective's fit needs two ranks");
  const auto [intercept, slope] = fit_line(points);
  const double k = static_cast<double>(ranks), passes = ring_passes(c);
  return {passes * (k - 1) / k / slope, intercept / (passes * (k - 1))};
}

namespace {

// One collective's mean time as a step sees it: between computations (on a shared CPU the
// scheduler's wake-up delays, up to a 4 ms tick, make a heavy tail that the best of a few runs
// would hide; in a TP step they were most of the collectives' time). `elems` (fp32, a multiple
// of the world size) is the V of its formula: the all-reduced tensor, the gathered whole, the
// scattered whole, what each rank sends in an all-to-all.
double mean_collective_seconds(Collective kind, int64_t elems, const std::string& device,
                               const at::TensorOptions& opts) {
  const int64_t n = dist::world_size();
  const auto f32 = opts.dtype(at::kFloat);
  auto whole = at::ones({elems}, f32), part = at::ones({elems / n}, f32),
       other = at::ones({elems}, f32);
  auto run = [&] {
    auto& w = dist::world();
    switch (kind) {
      case Collective::AllReduce:
        w.all_reduce(whole).wait();
        break;
      case Collective::AllGather:
        w.all_gather(whole, part).wait();
        break;
      case Collective::ReduceScatter:
        w.reduce_scatter(part, whole).wait();
        break;
      case Collective::AllToAll:
        w.all_to_all(other, whole).wait();
        break;
    }
  };
  const auto a = at::randn({256, 256}, opts), b = at::randn({256, 256}, opts);
  run();  // warm
  const int samples = elems <= (int64_t{1} << 17) ? 100 : 30;
  double total = 0;
  for (int i = 0; i < samples; ++i) {
    for (int g = 0; g < 4; ++g) (void)at::mm(a, b);
    sync(device);
    const auto start = Clock::now();
    run();
    sync(device);
    total += std::chrono::duration<double>(Clock::now() - start).count();
  }
  return total / samples;
}

// What overlapped communication costs the compute beside it: a run of GEMMs timed alone and
// while all-reduces of 4 MiB, posted ahead, keep the communication busy for longer than the
// GEMMs take, every rank at once. The GEMMs' extra time over their time beside the traffic (all
// of it overlapped), the median of 7 rounds, the ranks' mean: every rank's profile says the same.
double measure_overlap_cost(const std::string& device, const at::TensorOptions& opts) {
  auto& w = dist::world();
  const auto a = at::randn({384, 384}, opts), b = at::randn({384, 384}, opts);
  auto compute = [&] {
    const auto start = Clock::now();
    for (int i = 0; i < 40; ++i) (void)at::mm(a, b);
    sync(device);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  auto buffer = at::zeros({int64_t{1} << 20}, opts.dtype(at::kFloat));
  compute();  // warm
  w.all_reduce(buffer).wait();
  // Enough all-reduces to outlast the GEMMs (their own time, measured once).
  const auto start = Clock::now();
  for (int i = 0; i < 4; ++i) w.all_reduce(buffer).wait();
  const double one = std::chrono::duration<double>(Clock::now() - start).count() / 4;
  const double gemms = compute();
  // The same count on every rank (collectives must pair up): the largest any rank asks for.
  auto want = at::full({1}, std::clamp(3 * gemms / std::max(one, 1e-6), 4.0, 256.0),
                       at::TensorOptions().dtype(at::kDouble).device(opts.device()));
  w.all_reduce(want, dist::ReduceOp::Max).wait();
  const int posted = static_cast<int>(want.item<double>());
  std::vector<double> costs;
  for (int round = 0; round < 7; ++round) {
    w.barrier().wait();
    const double alone = compute();
    w.barrier().wait();
    std::vector<dist::Work> works;
    for (int i = 0; i < posted; ++i) works.push_back(w.all_reduce(buffer));
    const double beside = compute();
    for (auto& work : works) work.wait();
    costs.push_back(std::clamp((beside - alone) / beside, 0.0, 1.0));
  }
  std::sort(costs.begin(), costs.end());
  auto mean = at::full({1}, costs[costs.size() / 2],
                       at::TensorOptions().dtype(at::kDouble).device(opts.device()));
  w.all_reduce(mean).wait();
  return mean.item<double>() / static_cast<double>(dist::world_size());
}

// Every collective over the world at sizes 4 B..16 MiB, each fitted to its formula
// (collective_s): the link's own figures are the all-reduce's, the others kept per collective.
Link measure_link(const std::string& device, const at::TensorOptions& opts) {
  const int64_t n = dist::world_size();
  Link link;
  for (Collective c : kCollectives) {
    std::vector<std::pair<double, double>> runs;
    for (int64_t bytes : {int64_t{4}, int64_t{1} << 12, int64_t{1} << 16, int64_t{1} << 19,
                          int64_t{1} << 22, int64_t{1} << 24}) {
      const int64_t elems = std::max<int64_t>(n, bytes / 4 / n * n);
      runs.push_back(
          {4.0 * static_cast<double>(elems), mean_collective_seconds(c, elems, device, opts)});
    }
    const LinkFigures fitted = fit_collective(c, runs, n);
    if (c == Collective::AllReduce)
      static_cast<LinkFigures&>(link) = fitted;
    else
      link.measured[c] = fitted;
  }
  return link;
}

// `base`'s model with `layers` blocks, trained on `micro_batch` sequences per rank.
train::Config with_layers(const train::Config& base, int layers, int64_t micro_batch) {
  const int64_t ranks = dist::size_or_one();
  return train::Config::from_json(base.to_json(), "calibration block",
                                  {"model.n_layers=" + std::to_string(layers),
                                   "train.global_batch_size=" + std::to_string(ranks * micro_batch),
                                   "train.micro_batch_size=" + std::to_string(micro_batch)});
}

// How many more blocks the larger of a block pair has.
constexpr int kFewBlocks = 1, kManyBlocks = 3;

// Seconds of one block's forward and backward on `micro_batch` sequences of `base`'s model per
// rank, as training runs it: half the difference of a three-block and a one-block model, timed
// back to back in each round (median_difference), under a launcher with the family's plan
// template over every rank: as a data-parallel model (weights replicated, the batch Shard(0)),
// so DTensor dispatch is in the figure, or with `tensor_parallel` as a tensor-parallel one
// (the batch replicated).
double measured_block_seconds(const train::Config& base, int64_t micro_batch,
                              const std::string& device, bool tensor_parallel = false) {
  const auto few_config = with_layers(base, kFewBlocks, micro_batch),
             many_config = with_layers(base, kManyBlocks, micro_batch);
  auto few = train::build_model(few_config.model), many = train::build_model(many_config.model);
  few.module->to(at::Device(device));
  many.module->to(at::Device(device));
  const int64_t ranks = dist::size_or_one(), seq = base.train.seq_len;
  at::Tensor tokens = at::randint(0, base.model.vocab_size(), {micro_batch, seq},
                                  at::TensorOptions().dtype(at::kLong).device(device));
  if (ranks > 1) {
    Layout l;
    (tensor_parallel ? l.tp : l.dp) = ranks;
    const auto mesh = mesh::DeviceMesh::init({{tensor_parallel ? "tp" : "dp", ranks}});
    const auto plan =
        plan::Plan::from_json(plan_for_layout(plan_template_path(base.model.type), l, 1),
                              "the calibration's plan for " + l.describe());
    parallel::parallelize(*few.module, plan, mesh);
    parallel::parallelize(*many.module, plan, mesh);
    tokens = train::to_model_input(tokens, &mesh);  // rows split over dp, replicated over tp
  }
  return median_difference([&] { many.forward(tokens).sum().backward(); },
                           [&] { few.forward(tokens).sum().backward(); }, device) /
         (kManyBlocks - kFewBlocks);
}

// The cost model's time for one block of `base` on `micro_batch` sequences, with `profile`: one
// device's compute, or with `tensor_parallel` the world's tensor-parallel step (its
// collectives included).
double predicted_block_seconds(const train::Config& base, int64_t micro_batch,
                               const DeviceProfile& profile, bool tensor_parallel = false) {
  Layout l;
  l.micro_batch = micro_batch;
  const int64_t ranks = dist::size_or_one();
  if (tensor_parallel) l.tp = ranks;
  auto of = [&](int layers) {
    const auto config = with_layers(base, layers, micro_batch);
    const auto p = predict(model_shape(config), config, l, micro_batch, profile, ranks);
    return p.compute_s + (tensor_parallel ? p.exposed_s.at("tp") : 0.0);
  };
  return (of(kManyBlocks) - of(kFewBlocks)) / (kManyBlocks - kFewBlocks);
}

// Solves measured = A + x B for the profile figure x that predict's block time is linear in
// (`set(p, v)` sets it): A at x = 0, B the slope. 0 when what x explains is under `min_share`
// of the block (too small to read).
template <class Set>
double solve_block(const train::Config& base, int64_t micro_batch, const DeviceProfile& profile,
                   double measured, Set set, bool tensor_parallel = false, double min_share = 0.2) {
  DeviceProfile p = profile;
  set(p, 0.0);
  const double a = predicted_block_seconds(base, micro_batch, p, tensor_parallel);
  set(p, 1.0);
  const double b = predicted_block_seconds(base, micro_batch, p, tensor_parallel) - a;
  if (measured - a <= min_share * measured || b <= 0) return 0;
  return (measured - a) / b;
}

// The generic calibration blocks: a tiny LLaMA (width 64, 2 heads, 16 tokens: its GEMMs and
// elementwise work take microseconds) for the per-operation cost, and a LLaMA block of width
// 512 (SwiGLU 1536, 8 heads, 256 tokens) for the elementwise rate.
train::Config llama_block(int64_t dim, int64_t heads, int64_t ffn, int64_t seq) {
  return train::Config::from_json(
      "{}", "calibration block",
      {"model.type=\"llama\"", "model.dim=" + std::to_string(dim),
       "model.n_heads=" + std::to_string(heads), "model.n_kv_heads=" + std::to_string(heads),
       "model.ffn_dim=" + std::to_string(ffn), "model.vocab_size=256",
       "model.max_seq_len=" + std::to_string(seq), "model.n_layers=1",
       "train.seq_len=" + std::to_string(seq)});
}

// Seconds per framework operation as our training runs them: the tiny block's time beyond what
// the cost model gives its work, over the operations it counts (predict's compute at
// op_overhead 1 less at 0). A chain of multiplies on plain 64-element tensors measures a third
// to a half of this: real operations allocate, broadcast and dispatch more.
double block_op_overhead(const DeviceProfile& profile, const std::string& device) {
  const auto tiny = llama_block(64, 2, 128, 16);
  return solve_block(tiny, 1, profile, measured_block_seconds(tiny, 1, device),
                     [](DeviceProfile& p, double v) { p.op_overhead = v; });
}

// The elementwise rate a block achieves, given the profile's GEMM curve and per-operation cost:
// the block's time beyond what the cost model gives its GEMMs, attention and operations, over
// the bytes it counts for it (predict's compute as A + B / memory_bandwidth, solved for the
// bandwidth): the rate at which our eager block's elementwise work actually runs (freshly
// allocated outputs, transposes and broadcasts included), which a synthetic chain overstates.
// The block is the planned model's own when it is given and small enough to run here (its
// routing and family-specific work are then in the figure), else the generic one. 0 when the
// residual is too small to read (then the caller keeps the chain's figure).
double block_elementwise_rate(const DeviceProfile& profile, const std::string& device,
                              const train::Config& block, int64_t micro_batch) {
  const double inverse =
      solve_block(block, micro_batch, profile, measured_block_seconds(block, micro_batch, device),
                  [](DeviceProfile& p, double v) { p.memory_bandwidth = v > 0 ? 1 / v : 1e30; });
  return inverse > 0 ? 1 / inverse : 0;
}

// What a blocking collective between computations waits beyond its link time (DeviceProfile::
// collective_wait): `block` under tensor parallelism over the world, timed as training runs it,
// beyond the cost model's compute and TP collectives, over the collectives it counts. 0 when
// the block does not split over the world (its heads) or nothing is left to explain.
double block_collective_wait(const DeviceProfile& profile, const std::string& device,
                             const train::Config& block, int64_t micro_batch) {
  return solve_block(
      block, micro_batch, profile, measured_block_seconds(block, micro_batch, device, true),
      [](DeviceProfile& p, double v) { p.collective_wait = v; }, true, 0.0);
}

// The block the elementwise rate is read from: `model`'s own when it is given and small enough
// to time here in a few seconds, else the generic LLaMA block; and what to call it.
std::pair<train::Config, std::string> rate_block(const train::Config* model) {
  constexpr double kMaxParams = 20e6, kMaxTokens = 4096;
  if (model != nullptr) {
    const auto one = with_layers(*model, 1, 2);
    const auto shape = model_shape(one);
    const double tokens = 2.0 * static_cast<double>(model->train.seq_len);
    if (shape.layers.size() == 3 && shape.layers[1].params <= kMaxParams && tokens <= kMaxTokens)
      return {*model, "the planned model's own " + model->model.type + " block (width " +
                          std::to_string(shape.dim) + ", 2 x " +
                          std::to_string(model->train.seq_len) + " tokens)"};
  }
  return {llama_block(512, 8, 1536, 256),
          "a LLaMA block (width 512, SwiGLU 1536, 8 heads, 2 x "
          "256 tokens)"};
}

}  // namespace

DeviceProfile calibrate(const std::string& name, const std::string& device,
                        const train::Config* model) {
  DeviceProfile p;
  p.name = name;
  const auto opts = at::TensorOptions()
                        .device(device)
                        .dtype(device == "cpu" ? at::kFloat : at::kBFloat16);
  std::vector<std::pair<double, double>> gemms;
  for (int64_t n : {64, 128, 256, 384, 512, 768, 1024, 1536}) {
    const auto a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
    at::Tensor c;
    const double s = median_seconds([&] { c = at::mm(a, b); }, device);
    const double w = static_cast<double>(n) * n * n;
    gemms.push_back({w, 2 * w / s});
  }
  const auto [peak, half] = fit_gemm_curve(gemms);
  p.peak_flops = peak;
  p.gemm_efficiency = 1;  // the peak is the fitted large-GEMM rate itself
  p.gemm_half_work = half;
  if (device == "cpu") {
    p.fp32_peak_flops = peak;  // the curve was measured in fp32
  } else {
    // fp32 on the same curve: its largest GEMM's rate over the curve's fraction there.
    const int64_t n = 1536;
    const auto a = at::randn({n, n}, opts.dtype(at::kFloat)),
               b = at::randn({n, n}, opts.dtype(at::kFloat));
    at::Tensor c;
    const double w = static_cast<double>(n) * n * n;
    p.fp32_peak_flops = 2 * w / median_seconds([&] { c = at::mm(a, b); }, device) * (w + half) / w;
  }
  {
    // Elementwise ops as a block runs them: a chain on an activation-sized [1024, 768] tensor
    // (RMSNorm-like: pow, mean, rsqrt, mul; the SiLU gate: silu, mul; a residual add: 14
    // passes over the tensor) with autograd, forward and backward, its bytes counted as the
    // cost model counts them (backward twice the forward). Smaller tensors run from cache and
    // faster; larger ones than a block's are rare at the shapes a CPU trains.
    auto x = at::randn({1024, 768}, opts.dtype(at::kFloat)).set_requires_grad(true);
    const double s = median_seconds(
        [&] {
          auto n = x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + 1e-5);
          (at::silu(n) * n + x).sum().backward();
        },
        device);
    p.memory_bandwidth = 3.0 * 14 * static_cast<double>(x.nbytes()) / s;
  }
  {
    // A framework operation's own cost, autograd included: a chain of 20 multiplies of 64
    // elements, forward and backward, per forward operation and its share of the backward
    // (the cost model charges each counted operation three times: forward and backward).
    auto x = at::ones({64}, opts.dtype(at::kFloat)).set_requires_grad(true);
    const double s = median_seconds(
        [&] {
          auto y = x;
          for (int i = 0; i < 20; ++i) y = y * 1.0001;
          y.sum().backward();
        },
        device);
    p.op_overhead = s / (3.0 * 20);
  }
  p.attention_keeps_probabilities = device == "cpu";  // kernels/attention.h; flash on GPUs
  const double chain_bandwidth = p.memory_bandwidth, chain_overhead = p.op_overhead;
  double block_bandwidth = 0, block_overhead = 0;
  const auto block = rate_block(model);
  if (device == "cpu") {
    block_overhead = block_op_overhead(p, device);
    if (block_overhead > 0) p.op_overhead = block_overhead;
    block_bandwidth = block_elementwise_rate(p, device, block.first, 2);
    if (block_bandwidth > 0) p.memory_bandwidth = block_bandwidth;
  }
  const int64_t ranks = dist::size_or_one();
  const std::string how = "measured by vescale-plan --calibrate on " + today();
  if (device == "cpu") {
    // The host's memory, shared by this host's ranks.
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    p.memory_bytes = static_cast<double>(pages) * static_cast<double>(page) /
                     static_cast<double>(ranks);
    p.sources["memory_bytes"] = how + ": the host's physical memory over its " +
                                std::to_string(ranks) + " rank(s)";
    // Ranks on this host over its cores (every rank here calibrates at once, so the rates
    // above are each rank's share).
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int64_t local = dist::is_initialized() ? dist::launch_env().local_world_size : 1;
    if (cores > 0 && local > cores) {
      p.ranks_per_core = static_cast<double>(local) / static_cast<double>(cores);
      p.sources["ranks_per_core"] =
          how + ": " + std::to_string(local) + " ranks on " + std::to_string(cores) + " cores";
    }
  } else {
    p.memory_bytes = 80e9;
    p.sources["memory_bytes"] = "assumed 80 GB: set the device's memory by hand";
  }
  p.sources["peak_flops"] = how + ": the fitted large-GEMM rate (" +
                            (device == "cpu" ? "fp32" : "bf16") + " at::mm, 64..1536 square)";
  p.sources["gemm_half_work"] = how + ": the fit's half-rate GEMM size";
  p.sources["fp32_peak_flops"] =
      how + (device == "cpu" ? ": the fitted fp32 large-GEMM rate (bf16 not measured: the same)"
                             : ": an fp32 at::mm of 1536^3 on the bf16 curve");
  p.sources["memory_bandwidth"] =
      block_bandwidth > 0
          ? how + ": the elementwise rate of " + block.second +
                ", run as training runs it, timed "
                "forward and backward beyond what the cost model gives its GEMMs, attention "
                "and operations, over the bytes it counts (an RMSNorm, SiLU-gate and "
                "residual-add chain gave " +
                std::to_string(chain_bandwidth / 1e9) + " GB/s)"
          : how +
                ": an RMSNorm, SiLU-gate and residual-add chain on [1024, 768] fp32 with "
                "autograd, forward and backward (14 passes forward, twice that backward)";
  p.sources["op_overhead"] =
      block_overhead > 0
          ? how +
                ": a LLaMA block of width 64 on 16 tokens per rank, run as training runs it "
                "(DTensors under a launcher), timed forward and backward beyond what the cost "
                "model gives its work, over the operations it counts (20 multiplies of 64 "
                "elements with autograd gave " +
                std::to_string(chain_overhead * 1e6) + " us)"
          : how + ": 20 multiplies of 64 elements with autograd, forward and backward, over 3 x 20";
  p.sources["attention_keeps_probabilities"] =
      device == "cpu" ? "our CPU attention kernel keeps them (kernels/attention.h)"
                      : "flash attention recomputes them";
  p.gpus_per_node = ranks;
  if (ranks > 1) {
    p.overlap_cost = measure_overlap_cost(device, opts);
    p.sources["overlap_cost"] =
        how +
        ": 40 fp32 384^3 GEMMs timed alone and beside all-reduces of 4 MiB that outlast "
        "them, every rank at once; their extra time over their time beside, the median of "
        "7 rounds, the ranks' mean";
    p.intra_node = measure_link(device, opts);
    p.sources["intra_node"] =
        how +
        ": the mean times of all-reduces, all-gathers, reduce-scatters and all-to-alls of "
        "4 B..16 MiB over " +
        std::to_string(ranks) +
        " ranks, each after a little compute, each fitted to its formula (the link's own "
        "figures are the all-reduce's)";
  } else {
    p.intra_node = {1e12, 1e-6};
    p.sources["intra_node"] = "not measured (one rank): launch with several ranks to measure it";
  }
  p.inter_node = p.intra_node;
  p.sources["inter_node"] = "one host: the same as intra_node";
  if (ranks > 1 && device == "cpu") {
    try {
      p.collective_wait = block_collective_wait(p, device, block.first, 2);
      p.sources["collective_wait"] =
          how + ": " + block.second + " under tensor parallelism over the " +
          std::to_string(ranks) +
          " ranks, timed forward and backward beyond the cost model's compute and TP "
          "collectives, over the collectives it counts";
    } catch (const Error& e) {
      p.sources["collective_wait"] = how + ": not measured (the block does not split over " +
                                     std::to_string(ranks) + " ranks: " + e.what() + ")";
    }
  }
  return p;
}

}  // namespace vescale::planner
