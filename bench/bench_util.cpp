#include "bench_util.h"

#include <torch/csrc/autograd/profiler_legacy.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace bench {
namespace {

namespace prof = torch::autograd::profiler;

double cpu_ms(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

void print_profile(const std::string& title, const prof::thread_event_lists& threads, int steps,
                   bool by_shape) {
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
            for (size_t i = 0; i < shape.size(); ++i)
              key += (i ? "," : "") + std::to_string(shape[i]);
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
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.self_us > b.second.self_us; });
  double total = 0;
  for (auto& [n, s] : rows) total += s.self_us;
  if (!title.empty()) std::fprintf(stderr, "%s\n", title.c_str());
  std::fprintf(stderr, "%-64s %10s %12s\n", "op", "calls/step", "self ms/step");
  for (size_t i = 0; i < rows.size() && i < 40; ++i)
    std::fprintf(stderr, "%-64s %10.1f %12.2f\n", rows[i].first.c_str(),
                 rows[i].second.calls / double(steps), rows[i].second.self_us / 1000.0 / steps);
  std::fprintf(stderr, "%-64s %10s %12.2f\n", "total", "", total / 1000.0 / steps);
}

}  // namespace

double process_cpu_ms() { return cpu_ms(CLOCK_PROCESS_CPUTIME_ID); }
double thread_cpu_ms() { return cpu_ms(CLOCK_THREAD_CPUTIME_ID); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

OpProfile::OpProfile(std::string title, int steps, bool by_shape)
    : guard_(std::make_unique<prof::TLSLegacyProfilerGuard>(
          torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                by_shape),
          [title = std::move(title), steps, by_shape](const prof::thread_event_lists& t) {
            print_profile(title, t, steps, by_shape);
          })) {}

OpProfile::~OpProfile() = default;

}  // namespace bench
