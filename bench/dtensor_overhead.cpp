// Per-op wall time of DTensor vs plain local tensors, for small ops where dispatch overhead
// shows: add on 64x64, mm 256x256, a linear layer. Run under vescale-run (any world size).
// Prints one JSON line per case on rank 0; bench/dtensor_overhead.sh turns them into a table.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"

using namespace vescale;
using namespace vescale::dtensor;

namespace {

double mean_call_us(const std::function<void()>& f, int iters,
                    const std::function<void()>& before) {
  double total = 0;
  for (int i = 0; i < iters; ++i) {
    if (before) before();
    auto t0 = std::chrono::steady_clock::now();
    f();
    total +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  return total / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Plain and DTensor calls measured in alternating blocks, so that drift and the other
// rank's load hit both alike. Returns the medians of (plain, dtensor, dtensor - plain).
struct Timing {
  double plain, dtensor, overhead;
};
Timing paired_us(const std::function<void()>& plain, const std::function<void()>& dt, int iters,
                 int reps, const std::function<void()>& before = {}) {
  for (int i = 0; i < 50; ++i) plain(), (before ? before() : void()), dt();
  std::vector<double> p, d, o;
  for (int r = 0; r < reps; ++r) {
    p.push_back(mean_call_us(plain, iters, {}));
    d.push_back(mean_call_us(dt, iters, before));
    o.push_back(d.back() - p.back());
  }
  return {median(p), median(d), median(o)};
}

}  // namespace

int main() {
  at::set_num_threads(1);
  dist::init({.device = "cpu"});
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int iters = 2000, reps = 15;
  struct Case {
    std::string name;
    std::function<at::Tensor(const std::vector<at::Tensor>&)> op;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<Placements> placements;
  };
  std::vector<Case> cases{
      {"add 64x64 (Replicate)",
       [](auto& x) { return x[0] + x[1]; },
       {{64, 64}, {64, 64}},
       {{Replicate()}, {Replicate()}}},
      {"add 64x64 (Shard(0))",
       [](auto& x) { return x[0] + x[1]; },
       {{64, 64}, {64, 64}},
       {{Shard(0)}, {Shard(0)}}},
      {"mm 256x256 (Replicate)",
       [](auto& x) { return at::mm(x[0], x[1]); },
       {{256, 256}, {256, 256}},
       {{Replicate()}, {Replicate()}}},
      {"mm 256x256 (Shard(0) x Replicate)",
       [](auto& x) { return at::mm(x[0], x[1]); },
       {{256, 256}, {256, 256}},
       {{Shard(0)}, {Replicate()}}},
      {"linear 64x256 -> 256 (column-parallel)",
       [](auto& x) { return at::linear(x[0], x[1], x[2]); },
       {{64, 256}, {256, 256}, {256}},
       {{Replicate()}, {Shard(0)}, {Shard(0)}}},
  };
  for (auto& c : cases) {
    std::vector<at::Tensor> full, locals, dts;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      full.push_back(at::randn(c.shapes[i]));
      dts.push_back(distribute_tensor(full.back(), mesh, c.placements[i]));
      locals.push_back(to_local(dts.back()));
    }
    // NoGrad-free: these are inference-style calls; autograd recording is not what we measure.
    const int n = c.name.rfind("add", 0) == 0 ? iters : iters / 10;  // keep each case near a second
    auto hit = paired_us([&] { (void)c.op(locals); }, [&] { (void)c.op(dts); }, n, reps);
    auto miss = paired_us([&] { (void)c.op(locals); }, [&] { (void)c.op(dts); },
                          std::max(n / 10, 20), reps, [] { clear_propagation_cache(); });
    if (dist::rank() == 0)
      std::printf(
          "{\"impl\": \"vescale\", \"case\": \"%s\", \"world\": %d, \"plain_us\": %.2f, "
          "\"hit_us\": %.2f, "
          "\"overhead_us\": %.2f, \"miss_us\": %.2f, \"miss_overhead_us\": %.2f}\n",
          c.name.c_str(), dist::world_size(), hit.plain, hit.dtensor, hit.overhead, miss.dtensor,
          miss.overhead);
  }
  dist::shutdown();
  return 0;
}
