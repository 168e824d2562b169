// The divergence guard: decides, from a step's loss, gradient norm and parameter norm, whether the
// step may update the model and whether the checkpoint before it may become `latest`. A step
// fails when its loss or norm is NaN or inf, or (train.max_loss_spike = k > 0) when
//   its loss is above k x the median loss of the last 20 steps that passed, once warmup is over;
//   its loss is above k x ln(vocab_size), the loss of a uniform guess (a diverged model is far
//     above it);
//   the model collapsed: the gradient is exactly zero while the loss is positive (nothing can
//     learn any more), or the loss sits at ln(vocab_size) (uniform outputs) on two steps in a
//     row with an update between them;
//   the parameters' norm grew more than kMaxGrowth times in one update (the update exploded,
//     even where the loss does not show it yet).
// The error names the step, what happened, and the knobs worth turning (grad_clip only when it
// is off).
#pragma once
#include <cstdint>
#include <deque>

namespace vescale::train {

struct DivergenceGuardOptions {
  double max_loss_spike = 3.0;   // 0: only NaN/inf fail
  int64_t warmup_steps = 0;      // no median check before this many steps
  int64_t vocab_size = 0;        // 0: no ln(vocab) checks
  double lr = 0, grad_clip = 0;  // for the message
};

// What one step tells the guard. Every rank passes the same values.
struct StepHealth {
  int64_t step = 0;  // 1-based
  double loss = 0, grad_norm = 0;
  double prev_lr = 0;     // the learning rate of the update before this step (0: none)
  double param_norm = 0;  // the norm of the parameters this step ran with (0: unknown)
};

class DivergenceGuard {
 public:
  explicit DivergenceGuard(DivergenceGuardOptions options) : o_(options) {}

  // Throws vescale::Error when the step fails; else remembers its loss and parameter norm.
  void check(const StepHealth& h);
  void check(int64_t step, double loss, double grad_norm) { check({step, loss, grad_norm}); }
  // The median of the remembered losses (0 when none).
  double median() const;

  static constexpr int kWindow = 20;
  static constexpr double kMaxGrowth = 10;  // of the parameters' norm in one update
  static constexpr double kPinned = 1e-6;   // relative distance to ln(vocab) that counts as at it

 private:
  DivergenceGuardOptions o_;
  std::deque<double> recent_;
  double last_param_norm_ = 0;
};

}  // namespace vescale::train
