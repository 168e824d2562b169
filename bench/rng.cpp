// Throughput of the consistent RNG's CPU kernel vs libtorch's own CPU generator on the same
// tensor size. Writes bench/results/rng.md (run from the repository root).
//   rng --cuda [--numel N] [--json PATH] [--dry-run]
// fills a large fp32 CUDA tensor with vescale::random uniform_/normal_/bernoulli_ instead and
// reports GB/s written (against the H200's 4.8 TB/s) as JSON; --dry-run runs the same code on
// the CPU at a tiny size, for a machine without a GPU (scripts/device-check --dry-run).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <torch/cuda.h>

#include "vescale/random/random.h"

namespace {

double median_ms(const std::function<void()>& f, int reps) {
  f();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string today() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// GB/s written by our fills of one large fp32 tensor on the GPU (or, dry run, a small one on
// the CPU). Each timed fill is synchronized on both sides, so a median is one kernel's time.
int cuda_main(int64_t n, const std::string& json, bool dry_run) {
  const bool gpu = torch::cuda::is_available();
  if (!gpu && !dry_run) {
    std::fprintf(stderr, "rng --cuda: no CUDA device is visible (use --dry-run to check the code on the CPU)\n");
    return 1;
  }
  if (dry_run) n = std::min<int64_t>(n, 1 << 16);
  const int reps = dry_run ? 2 : 21;
  at::Tensor out = at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(gpu && !dry_run ? at::kCUDA : at::kCPU));
  auto sync = [&] {
    if (out.is_cuda()) torch::cuda::synchronize();
  };
  struct Case {
    const char* name;
    std::function<void()> fill;
  };
  std::vector<Case> cases{
      {"uniform", [&] { vescale::random::uniform_(out); }},
      {"normal", [&] { vescale::random::normal_(out); }},
      {"bernoulli", [&] { vescale::random::bernoulli_(out, 0.9); }},
      {"torch_uniform", [&] { out.uniform_(); }},  // libtorch's own Philox on CUDA, for scale
  };
  const double bytes = 4.0 * static_cast<double>(n);
  std::string rows;
  for (auto& c : cases) {
    const double ms = median_ms([&] { c.fill(); sync(); }, reps);
    const double gbs = bytes / (ms / 1000.0) / 1e9;
    char row[256];
    std::snprintf(row, sizeof row,
                  "%s\n    {\"fill\": \"%s\", \"ms\": %.4f, \"gb_per_s\": %.1f, \"of_4800\": %.4f}",
                  rows.empty() ? "" : ",", c.name, ms, gbs, gbs / 4800.0);
    rows += row;
    std::printf("%-14s %10.4f ms  %8.1f GB/s written  (%.1f%% of 4.8 TB/s)\n", c.name, ms, gbs,
                100.0 * gbs / 4800.0);
  }
  char head[512];
  std::snprintf(head, sizeof head,
                "{\"bench\": \"rng_cuda\", \"date\": \"%s\", \"torch\": \"%s\", \"device\": \"%s\", "
                "\"dry_run\": %s, \"numel\": %lld, \"bytes\": %.0f, \"reps\": %d, \"peak_gb_per_s\": 4800,\n  \"fills\": [",
                today().c_str(), TORCH_VERSION_STRING, out.is_cuda() ? "cuda" : "cpu",
                dry_run ? "true" : "false", static_cast<long long>(n), bytes, reps);
  const std::string doc = std::string(head) + rows + "\n  ]\n}\n";
  if (!json.empty()) std::ofstream(json) << doc;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool cuda = false, dry_run = false;
  int64_t numel = int64_t{1} << 28;  // 1 GiB of fp32: many times the H200's 60 MB L2
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cuda") {
      cuda = true;
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--numel" && i + 1 < argc) {
      numel = std::stoll(argv[++i]);
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: rng [--cuda [--numel N] [--json PATH] [--dry-run]]\n");
      return 2;
    }
  }
  if (cuda) return cuda_main(numel, json, dry_run);
  const int64_t n = 1 << 24;  // 16M floats
  const int reps = 9;
  at::Tensor out = at::empty({n});
  std::string table =
      "| distribution | threads | vescale ms | libtorch ms | vescale / libtorch "
      "|\n|---|---|---|---|---|\n";
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    struct Case {
      const char* name;
      std::function<void()> ours, torch;
    };
    std::vector<Case> cases{
        {"uniform [0, 1)", [&] { vescale::random::uniform_(out); }, [&] { out.uniform_(); }},
        {"normal (0, 1)", [&] { vescale::random::normal_(out); }, [&] { out.normal_(); }},
        {"bernoulli (0.9)", [&] { vescale::random::bernoulli_(out, 0.9); },
         [&] { out.bernoulli_(0.9); }},
    };
    for (auto& c : cases) {
      const double ours = median_ms(c.ours, reps), theirs = median_ms(c.torch, reps);
      char row[256];
      std::snprintf(row, sizeof row, "| %s | %d | %.1f | %.1f | %.2fx |\n", c.name, threads, ours,
                    theirs, ours / theirs);
      table += row;
    }
  }
  std::string doc = "# Consistent RNG throughput (CPU)\n\n" + today() + ". Machine: " + cpu_name() +
                    ", " + std::to_string(std::thread::hardware_concurrency()) +
                    " cores; torch " TORCH_VERSION_STRING
                    "; a float32 tensor of 16M elements, median of 9 runs.\n"
                    "libtorch = the tensor's own `uniform_/normal_/bernoulli_` (mt19937, not "
                    "shard-consistent).\n\n" +
                    table +
                    "\nOurs computes every element from (seed, offset, global index) with "
                    "Philox4x32-10 and, for normals,\n"
                    "Box-Muller in double with our own log/sin/cos (so CPU and CUDA agree bit for "
                    "bit), 64 elements\n"
                    "at a time in SIMD loops (AVX2 where the CPU has it).\n"
                    "Reproduce: `build/bench/rng` from the repository root.\n";
  std::printf("%s", doc.c_str());
  std::ofstream("bench/results/rng.md") << doc;
  return 0;
}
