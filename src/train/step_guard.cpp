// The divergence guard as a step meets it (step_guard.h).
#include "vescale/train/step_guard.h"

#include <ATen/ATen.h>

#include <cmath>

#include "vescale/dist/world.h"
#include "vescale/optim/optimizer.h"

namespace vescale::train {

StepGuard::StepGuard(DivergenceGuardOptions options, int64_t world_size)
    : guard_(options), world_size_(world_size) {}

void StepGuard::measure(optim::Optimizer& optimizer, double lr) {
  prev_lr_ = lr;
  sq_ = optimizer.param_sum_of_squares();
  if (!sq_.defined()) return;
  sq_ = sq_.reshape({1});
  if (world_size_ > 1) work_ = dist::world().all_reduce(sq_);
}

double StepGuard::param_norm() {
  if (!sq_.defined()) return 0;
  work_.wait();
  work_ = {};
  return std::sqrt(sq_.item<double>());
}

void StepGuard::check(int64_t step, double loss, double grad_norm, double param_norm) {
  guard_.check({step, loss, grad_norm, prev_lr_, param_norm});
}

}  // namespace vescale::train
