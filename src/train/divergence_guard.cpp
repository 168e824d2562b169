#include "vescale/train/divergence_guard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "vescale/common/check.h"

namespace vescale::train {

namespace {

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", x);
  return buf;
}

}  // namespace

double DivergenceGuard::median() const {
  if (recent_.empty()) return 0;
  std::vector<double> v(recent_.begin(), recent_.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

void DivergenceGuard::check(const StepHealth& h) {
  const int64_t step = h.step;
  const double loss = h.loss;
  const std::string stop =
      "; stopping before the update, and the checkpoint before this step does not become latest. ";
  const std::string knobs =
      "Lower train.lr (now " + num(o_.lr) + ") or raise train.warmup_steps (now " +
      std::to_string(o_.warmup_steps) + ")" +
      (o_.grad_clip == 0 ? ", or set train.grad_clip (now 0: clipping is off)" : "");
  VESCALE_CHECK(std::isfinite(loss), "step ", step, ": the loss is ", loss, stop, knobs,
                ", or check the data");
  VESCALE_CHECK(std::isfinite(h.grad_norm), "step ", step, ": the gradient norm is ", h.grad_norm,
                " (loss ", num(loss), ")", stop, knobs);
  const double k = o_.max_loss_spike;
  const std::string off =
      "; or raise train.max_loss_spike (now " + num(k) + ", 0 turns this check off)";
  const double uniform = o_.vocab_size > 1 ? std::log(static_cast<double>(o_.vocab_size)) : 0;
  const bool at_uniform = uniform > 0 && std::abs(loss - uniform) <= kPinned * uniform;
  if (k > 0) {
    VESCALE_CHECK(
        !(h.param_norm > 0 && last_param_norm_ > 0 && h.param_norm > kMaxGrowth * last_param_norm_),
        "step ", step, ": the parameters' norm grew from ", num(last_param_norm_), " to ",
        num(h.param_norm), " (x", num(h.param_norm / last_param_norm_),
        ") in the last update: it exploded", stop, knobs, off);
    VESCALE_CHECK(!(h.grad_norm == 0 && loss > 0), "step ", step,
                  ": the gradient is exactly zero while the loss is ", num(loss),
                  at_uniform ? " = ln(vocab_size), the loss of uniform outputs" : "",
                  ": the model collapsed and cannot learn from here", stop, knobs, off);
    VESCALE_CHECK(!(at_uniform && h.prev_lr > 0 && !recent_.empty() &&
                    std::abs(recent_.back() - uniform) <= kPinned * uniform),
                  "step ", step, ": the loss is pinned at ln(vocab_size) = ", num(uniform),
                  " (uniform outputs) for two steps in a row: the model collapsed", stop, knobs,
                  off);
  }
  if (k > 0 && uniform > 0) {
    VESCALE_CHECK(loss <= k * uniform, "step ", step, ": the loss ", num(loss),
                  " is above train.max_loss_spike x ", "ln(vocab_size) = ", num(k), " x ",
                  num(uniform), ", far worse than a uniform guess: the model diverged", stop, knobs,
                  off);
  }
  if (k > 0 && step > o_.warmup_steps && !recent_.empty()) {
    const double m = median();
    VESCALE_CHECK(loss <= k * m, "step ", step, ": the loss ", num(loss),
                  " is above train.max_loss_spike x the median ", "of the last ", recent_.size(),
                  " steps = ", num(k), " x ", num(m), stop, knobs, off);
  }
  recent_.push_back(loss);
  if (recent_.size() > static_cast<size_t>(kWindow)) recent_.pop_front();
  if (h.param_norm > 0) last_param_norm_ = h.param_norm;
}

}  // namespace vescale::train
