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

void DivergenceGuard::check(int64_t step, double loss, double grad_norm) {
  const std::string stop =
      "; stopping before the update, and the checkpoint before this step does not become latest. ";
  const std::string knobs =
      "Lower train.lr (now " + num(o_.lr) + ") or raise train.warmup_steps (now " +
      std::to_string(o_.warmup_steps) + ")" +
      (o_.grad_clip == 0 ? ", or set train.grad_clip (now 0: clipping is off)" : "");
  VESCALE_CHECK(std::isfinite(loss), "step ", step, ": the loss is ", loss, stop, knobs,
                ", or check the data");
  VESCALE_CHECK(std::isfinite(grad_norm), "step ", step, ": the gradient norm is ", grad_norm,
                " (loss ", num(loss), ")", stop, knobs);
  const double k = o_.max_loss_spike;
  const std::string off =
      "; or raise train.max_loss_spike (now " + num(k) + ", 0 turns this check off)";
  if (k > 0 && o_.vocab_size > 1) {
    const double uniform = std::log(static_cast<double>(o_.vocab_size));
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
}

}  // namespace vescale::train
