// Learning-rate schedules: linear warmup, then cosine (or linear) decay to a floor.
#pragma once
#include <cstdint>

namespace vescale::optim {

// After warmup: a half cosine to the floor, a straight line to it, or the peak throughout.
enum class Decay { Cosine, Linear, Constant };

struct LRSchedule {
  double lr = 3e-4;      // peak, reached at the end of warmup
  double min_lr = 3e-5;  // the floor the decay ends at
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  Decay decay = Decay::Cosine;
};

// The lr of optimizer step `step` (0-based): lr * (step + 1) / warmup_steps during warmup (so
// the first step is not wasted at lr 0), then the decay from lr at step == warmup_steps to
// min_lr at step == total_steps; min_lr after that.
double lr_at(const LRSchedule& s, int64_t step);

}  // namespace vescale::optim
