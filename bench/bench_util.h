// Helpers the C++ benchmarks share: CPU clocks, the median, and an op-profile table.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace torch::autograd::profiler {
struct TLSLegacyProfilerGuard;
}

namespace bench {

// This process's / this thread's CPU time. Unlike wall time they leave out the time other
// processes on a shared machine take the core away; the thread's also leaves out other threads
// (Gloo's) and time spent waiting.
double process_cpu_ms();
double thread_cpu_ms();

// The middle value (the mean of the two middle ones for an even count).
double median(std::vector<double> v);

// Records the dispatcher ops this thread runs while it lives (libtorch's legacy profiler) and,
// when it ends, prints to stderr each op's calls and self time (its time minus the ops it called)
// per step, averaged over `steps`, under `title`. by_shape splits ops by their input shapes. A
// DTensor op shows twice: its own self time is the DTensor layer's overhead, the local op under
// it the kernel.
class OpProfile {
 public:
  OpProfile(std::string title, int steps, bool by_shape);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

 private:
  std::unique_ptr<torch::autograd::profiler::TLSLegacyProfilerGuard> guard_;
};

}  // namespace bench
