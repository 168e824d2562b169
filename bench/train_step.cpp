// One training step of vescale's trainer (single rank, fp32, CPU, 1 thread): GPT forward,
// cross-entropy, backward, global-norm clipping, AdamW, from the built-in corpus. Prints one
// JSON line per measured step for bench/train_step.sh, which runs the PyTorch Python loop
// (bench/train_step.py) on the same dims alternately and writes bench/results/train_step.md.
// The trainer gets a 1-device mesh, as vescale-train builds one.
//   train_step CONFIG STEPS [--set k=v ...]
// VESCALE_PROFILE=1: record the steps after the first two with libtorch's autograd profiler
// and print, to stderr, each op's calls and self time per step (the Python loop's
// VESCALE_PROFILE=1 prints torch.profiler's table for the same steps). VESCALE_PROFILE=shapes
// splits each op by its input shapes.
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/train/trainer.h"

namespace {

namespace prof = torch::autograd::profiler;

// Self time (an op's time minus the ops it called) and calls per op name, per step.
void print_profile(const prof::thread_event_lists& threads, int steps, bool by_shape) {
  struct Sum {
    double self_us = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Sum> sums;
  for (const auto& events : threads) {
    struct Open {
      const prof::LegacyEvent* push;
      double child_us = 0;
    };
    std::vector<Open> stack;
    for (const auto& e : events) {
      if (e.kind() == prof::EventKind::PushRange) {
        stack.push_back({&e});
      } else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        const Open o = stack.back();
        stack.pop_back();
        const double total = o.push->cpuElapsedUs(e);
        std::string key = o.push->name();
        if (by_shape) {
          for (const auto& shape : o.push->shapes()) {
            key += " [";
            for (size_t i = 0; i < shape.size(); ++i) key += (i ? "," : "") + std::to_string(shape[i]);
            key += "]";
          }
        }
        auto& s = sums[key];
        s.self_us += total - o.child_us;
        s.calls += 1;
        if (!stack.empty()) stack.back().child_us += total;
      }
    }
  }
  std::vector<std::pair<std::string, Sum>> rows(sums.begin(), sums.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.self_us > b.second.self_us; });
  double total = 0;
  for (auto& [n, s] : rows) total += s.self_us;
  std::fprintf(stderr, "%-64s %10s %12s\n", "op", "calls/step", "self ms/step");
  for (size_t i = 0; i < rows.size() && i < 40; ++i)
    std::fprintf(stderr, "%-64s %10.1f %12.2f\n", rows[i].first.c_str(), rows[i].second.calls / double(steps),
                 rows[i].second.self_us / 1000.0 / steps);
  std::fprintf(stderr, "%-64s %10s %12.2f\n", "total", "", total / 1000.0 / steps);
}

// This thread's CPU time: unlike the wall time it leaves out the time other processes on this
// shared machine take the core away (the step runs on this one thread).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: train_step CONFIG STEPS [--set k=v ...]\n");
    return 2;
  }
  try {
    at::set_num_threads(1);
    vescale::log::init(0, "warn");
    std::vector<std::string> sets{"log.metrics_jsonl=\"\"", "train.grad_accum=1", "train.dtype=fp32"};
    for (int i = 3; i + 1 < argc; i += 2) sets.emplace_back(argv[i + 1]);
    const int steps = std::stoi(argv[2]);
    sets.push_back("train.steps=" + std::to_string(steps));
    auto cfg = vescale::train::Config::from_file(argv[1], sets);
    vescale::dist::init();
    auto mesh = vescale::mesh::DeviceMesh::init({{"dp", 1}});
    const char* profile_env = std::getenv("VESCALE_PROFILE");
    const bool profile = profile_env != nullptr, by_shape = profile && std::string(profile_env) == "shapes";
    {
      vescale::train::Trainer trainer(cfg, mesh);
      std::unique_ptr<prof::TLSLegacyProfilerGuard> recording;
      for (int s = 0; s < steps; ++s) {
        if (profile && s == 2)
          recording = std::make_unique<prof::TLSLegacyProfilerGuard>(
              torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU, by_shape),
              [&](const prof::thread_event_lists& t) { print_profile(t, steps - 2, by_shape); });
        const double cpu0 = thread_cpu_ms();
        auto m = trainer.step(s);
        const double cpu_ms = thread_cpu_ms() - cpu0;
        std::printf("{\"impl\": \"vescale\", \"step\": %d, \"ms\": %.3f, \"cpu_ms\": %.3f, \"loss\": %.4f}\n", s,
                    m.step_ms, cpu_ms, m.loss);
        std::fflush(stdout);
      }
    }
    vescale::dist::shutdown();
  } catch (const vescale::Error& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
