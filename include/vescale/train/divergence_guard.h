// The divergence guard: decides, from a step's loss and gradient norm, whether the step may
// update the model and whether the checkpoint before it may become `latest`. A step fails when
// its loss or norm is NaN or inf, or (train.max_loss_spike = k > 0) when its loss is above
//   k x the median loss of the last 20 steps that passed, once warmup is over, or
//   k x ln(vocab_size), the loss of a uniform guess, at any step (a diverged model is far above
//   it).
// The error names the step, what happened, and the knobs worth turning (grad_clip only when it
// is off).
#pragma once
#include <cstdint>
#include <deque>

namespace vescale::train {

struct DivergenceGuardOptions {
  double max_loss_spike = 3.0;   // 0: only NaN/inf fail
  int64_t warmup_steps = 0;      // no median check before this many steps
  int64_t vocab_size = 0;        // 0: no ln(vocab) bound
  double lr = 0, grad_clip = 0;  // for the message
};

class DivergenceGuard {
 public:
  explicit DivergenceGuard(DivergenceGuardOptions options) : o_(options) {}

  // `step` is 1-based. Throws vescale::Error when the step fails; else remembers its loss.
  void check(int64_t step, double loss, double grad_norm);
  // The median of the remembered losses (0 when none).
  double median() const;

  static constexpr int kWindow = 20;

 private:
  DivergenceGuardOptions o_;
  std::deque<double> recent_;
};

}  // namespace vescale::train
