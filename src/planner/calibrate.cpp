#include "vescale/planner/calibrate.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "vescale/common/check.h"
#include "vescale/dist/world.h"

namespace vescale::planner {
namespace {

using Clock = std::chrono::steady_clock;

void sync(const std::string& device) {
  if (device != "cpu") at::empty({1}, at::TensorOptions().device(device)).cpu();  // drains the stream
}

// The best of a few timings of `f`, each long enough (at least 50 ms in repeats) to time.
template <class F>
double best_seconds(F&& f, const std::string& device) {
  f();  // warm-up
  sync(device);
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {
    int reps = 0;
    const auto start = Clock::now();
    double took = 0;
    do {
      f();
      ++reps;
      sync(device);
      took = std::chrono::duration<double>(Clock::now() - start).count();
    } while (took < 0.05);
    best = std::min(best, took / reps);
  }
  return best;
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

Link fit_all_reduce(const std::vector<std::pair<double, double>>& points, int64_t ranks) {
  VESCALE_CHECK(points.size() >= 2 && ranks >= 2,
                "calibrate: the all-reduce fit needs two sizes and two ranks");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(points.size());
  for (const auto& [x, y] : points) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / n;
  VESCALE_CHECK(slope > 0, "calibrate: the all-reduce times do not grow with the size; rerun on "
                "a quieter machine");
  const double k = static_cast<double>(ranks);
  return {2 * (k - 1) / k / slope, std::max(intercept, 0.0) / (2 * (k - 1))};
}

DeviceProfile calibrate(const std::string& name, const std::string& device) {
  DeviceProfile p;
  p.name = name;
  const auto opts = at::TensorOptions()
                        .device(device)
                        .dtype(device == "cpu" ? at::kFloat : at::kBFloat16);
  std::vector<std::pair<double, double>> gemms;
  for (int64_t n : {64, 128, 256, 384, 512, 768, 1024, 1536}) {
    const auto a = at::randn({n, n}, opts), b = at::randn({n, n}, opts);
    at::Tensor c;
    const double s = best_seconds([&] { c = at::mm(a, b); }, device);
    const double w = static_cast<double>(n) * n * n;
    gemms.push_back({w, 2 * w / s});
  }
  const auto [peak, half] = fit_gemm_curve(gemms);
  p.peak_flops = peak;
  p.gemm_efficiency = 1;  // the peak is the fitted large-GEMM rate itself
  p.gemm_half_work = half;
  {
    const auto src = at::empty({64 << 20}, opts.dtype(at::kFloat));
    auto dst = at::empty_like(src);
    src.fill_(1);
    const double s = best_seconds([&] { dst.copy_(src); }, device);
    p.memory_bandwidth = 2.0 * static_cast<double>(src.nbytes()) / s;
  }
  {
    // A framework operation's own cost: an add of 64 elements is almost nothing but dispatch.
    const auto x = at::ones({64}, opts), y = at::ones({64}, opts);
    at::Tensor z;
    p.op_overhead = best_seconds([&] { z = at::add(x, y); }, device);
  }
  const int64_t ranks = dist::is_initialized() ? dist::world_size() : 1;
  const std::string how = "measured by vescale-plan --calibrate on " + today();
  if (device == "cpu") {
    // The host's memory, shared by this host's ranks.
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    p.memory_bytes = static_cast<double>(pages) * static_cast<double>(page) /
                     static_cast<double>(ranks);
    p.sources["memory_bytes"] = how + ": the host's physical memory over its " +
                                std::to_string(ranks) + " rank(s)";
  } else {
    p.memory_bytes = 80e9;
    p.sources["memory_bytes"] = "assumed 80 GB: set the device's memory by hand";
  }
  p.sources["peak_flops"] = how + ": the fitted large-GEMM rate (" +
                            (device == "cpu" ? "fp32" : "bf16") + " at::mm, 64..1536 square)";
  p.sources["gemm_half_work"] = how + ": the fit's half-rate GEMM size";
  p.sources["memory_bandwidth"] = how + ": a 256 MiB copy, read + write";
  p.sources["op_overhead"] = how + ": an add of 64 elements";
  p.gpus_per_node = ranks;
  if (ranks > 1) {
    std::vector<std::pair<double, double>> runs;
    for (int64_t elems : {int64_t{1} << 10, int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 21,
                          int64_t{1} << 22}) {
      auto t = at::ones({elems}, opts.dtype(at::kFloat));
      dist::world().all_reduce(t).wait();  // warm
      double best = 1e30;
      for (int i = 0; i < 5; ++i) {
        dist::world().all_reduce(at::ones({1}, t.options())).wait();  // start together
        const auto start = Clock::now();
        dist::world().all_reduce(t).wait();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
      }
      runs.push_back({static_cast<double>(t.nbytes()), best});
    }
    p.intra_node = fit_all_reduce(runs, ranks);
    // The latency from a one-element all-reduce (the line's intercept is too noisy: it can
    // come out negative): 2 (n-1) steps of it.
    double tiny = 1e30;
    auto one = at::ones({1}, opts.dtype(at::kFloat));
    for (int i = 0; i < 20; ++i) {
      dist::world().all_reduce(at::ones({1}, one.options())).wait();
      const auto start = Clock::now();
      dist::world().all_reduce(one).wait();
      tiny = std::min(tiny, std::chrono::duration<double>(Clock::now() - start).count());
    }
    p.intra_node.latency = tiny / (2.0 * static_cast<double>(ranks - 1));
    p.sources["intra_node"] = how + ": the bandwidth from all-reduces of 4 KiB..16 MiB over " +
                              std::to_string(ranks) +
                              " ranks fitted to the ring formula, the latency from one-element "
                              "all-reduces";
  } else {
    p.intra_node = {1e12, 1e-6};
    p.sources["intra_node"] = "not measured (one rank): launch with several ranks to measure it";
  }
  p.inter_node = p.intra_node;
  p.sources["inter_node"] = "one host: the same as intra_node";
  return p;
}

}  // namespace vescale::planner
