// The divergence guard as a step meets it: the parameters' norm is summed over the world in the
// background after each update and read with the next step's loss (no extra host sync), and the
// update's learning rate is remembered for the guard's collapse check.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "vescale/dist/process_group.h"
#include "vescale/train/divergence_guard.h"

namespace vescale::optim {
class Optimizer;
}

namespace vescale::train {

class StepGuard {
 public:
  // `world_size` > 1: the sums of squares are all-reduced over the world.
  StepGuard(DivergenceGuardOptions options, int64_t world_size);

  // After an update with learning rate `lr` (before step 1: 0): starts summing the parameters'
  // squares, each value counted once (optim::Optimizer::param_sum_of_squares). Collective.
  void measure(optim::Optimizer& optimizer, double lr);
  // The norm of the parameters the next step runs with; waits for measure's sum (0: unknown).
  double param_norm();
  // Throws vescale::Error when the step fails (divergence_guard.h); every rank passes the same.
  void check(int64_t step, double loss, double grad_norm, double param_norm);

 private:
  DivergenceGuard guard_;
  int64_t world_size_;
  at::Tensor sq_;
  dist::Work work_;
  double prev_lr_ = 0;  // the last update's
};

}  // namespace vescale::train
