// Internal: the trainer's timeline window (docs/timeline.md). Spans of the window's steps on
// every rank, gathered to rank 0 at its end, merged on rank 0's clock, written as a Chrome
// trace, and summarized.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vescale/mesh/device_mesh.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/timeline/summary.h"
#include "vescale/train/config.h"

namespace torch::nn {
class Module;
}

namespace vescale::train {

class TimelineWindow {
 public:
  // Hooks every module matching `block_pattern` (the transformer blocks) for forward and
  // backward spans; nothing is recorded outside the window.
  TimelineWindow(const Config& config, const mesh::DeviceMesh* mesh, torch::nn::Module& model,
                 const std::string& block_pattern);
  ~TimelineWindow();  // puts the blocks' previous hooks back

  bool contains(int64_t step) const { return step >= first_ && step <= last_; }
  // Before step `step` (1-based): at the window's first step, aligns the clocks and starts
  // recording. Collective.
  void before_step(int64_t step);
  // After step `step`: at the window's last, stops, gathers, and on rank 0 writes the trace
  // and returns the summary (other ranks and other steps: nullopt). Collective.
  std::optional<timeline::Summary> after_step(int64_t step);

 private:
  static constexpr int64_t kResyncNs = 5LL * 60 * 1000 * 1000 * 1000;  // 5 minutes
  const Config& config_;
  const mesh::DeviceMesh* mesh_;
  int64_t first_ = 0, last_ = -1;
  int64_t begin_ns_ = 0;
  std::vector<timeline::ClockSample> clock_;
  std::vector<nn::HookHandle> links_;  // each block's span link (nn::HookSlot::Timeline)
};

}  // namespace vescale::train
