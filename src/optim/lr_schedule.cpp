#include "vescale/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "vescale/common/check.h"

namespace vescale::optim {

double lr_at(const LRSchedule& s, int64_t step) {
  VESCALE_CHECK(step >= 0, "lr_at: step must be >= 0, got ", step);
  if (step < s.warmup_steps)
    return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.decay == Decay::Constant) return s.lr;
  const int64_t span = std::max<int64_t>(1, s.total_steps - s.warmup_steps);
  const double t =
      std::min(1.0, static_cast<double>(step - s.warmup_steps) / static_cast<double>(span));
  if (s.decay == Decay::Linear) return s.lr + t * (s.min_lr - s.lr);
  return s.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * t)) * (s.lr - s.min_lr);
}

}  // namespace vescale::optim
