// The trainer's fused cross-entropy against ATen's log_softmax + nll_loss (at::cross_entropy)
// and against values worked out by hand.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <cmath>
#include <limits>

#include "vescale/common/check.h"
#include "vescale/kernels/cross_entropy.h"

using vescale::kernels::cross_entropy;

namespace {
struct LossAndGrad {
  double loss;
  at::Tensor grad;
};

// loss * upstream, backpropagated to a fresh leaf copy of the logits.
template <class F>
LossAndGrad run(F&& loss_fn, const at::Tensor& logits, const at::Tensor& targets, double upstream) {
  at::Tensor x = logits.detach().clone().set_requires_grad(true);
  at::Tensor loss = loss_fn(x, targets);
  (loss * upstream).backward();
  return {loss.item<double>(), x.grad()};
}
}  // namespace

TEST_CASE("fused cross_entropy equals at::cross_entropy in value and gradient", "[train][loss]") {
  // Vocab sizes with and without a tail past the last 8-wide block, and one below 8.
  const auto [n, v] =
      GENERATE(std::pair<int64_t, int64_t>{37, 300}, std::pair<int64_t, int64_t>{64, 256},
               std::pair<int64_t, int64_t>{5, 3}, std::pair<int64_t, int64_t>{9, 50257});
  const double offset = GENERATE(0.0, 1e4);  // large logits: the max must be subtracted first
  CAPTURE(n, v, offset);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor logits = at::randn({n, v}, gen) * 4 + offset;
  at::Tensor targets = at::randint(v, {n}, gen);
  const double upstream = 2.5;  // e.g. a loss scale, or 1 / grad_accum
  auto ours = run([](auto& x, auto& t) { return cross_entropy(x, t); }, logits, targets, upstream);
  auto ref =
      run([](auto& x, auto& t) { return at::cross_entropy_loss(x, t); }, logits, targets, upstream);
  CHECK(ours.loss == Approx(ref.loss).epsilon(1e-6));
  REQUIRE(ours.grad.sizes() == ref.grad.sizes());
  // Gradients against ATen in float64. Both fp32 results sum v exponentials per row, in
  // different orders (ATen's depends on the CPU's vector width): allow the usual fp32 error of
  // such a sum, ~sqrt(v) roundings of 2^-24 relative, on the largest gradient.
  auto ref64 = run([](auto& x, auto& t) { return at::cross_entropy_loss(x, t); },
                   logits.to(at::kDouble), targets, upstream);
  const double max_grad = ref64.grad.abs().max().item<double>();
  const double bound = max_grad * (8 + std::sqrt(static_cast<double>(v))) * std::ldexp(1.0, -24);
  const double err = (ours.grad.to(at::kDouble) - ref64.grad).abs().max().item<double>();
  const double aten_err = (ref.grad.to(at::kDouble) - ref64.grad).abs().max().item<double>();
  CAPTURE(err, aten_err, bound);
  CHECK(err <= bound);
}

TEST_CASE("fused cross_entropy on a hand-computed example", "[train][loss]") {
  // Row 0: logits (0, ln 3), target 0: p = (1/4, 3/4), loss ln 4.
  // Row 1: logits (ln 2, ln 2, 0), target 2: p = (2/5, 2/5, 1/5), loss ln 5 (padded to 3 columns
  // with -inf in row 0, whose probability is 0).
  const float inf = std::numeric_limits<float>::infinity();
  at::Tensor logits =
      at::tensor({0.0f, std::log(3.0f), -inf, std::log(2.0f), std::log(2.0f), 0.0f}).view({2, 3});
  at::Tensor targets = at::tensor({int64_t{0}, int64_t{2}});
  auto r = run([](auto& x, auto& t) { return cross_entropy(x, t); }, logits, targets, 1.0);
  CHECK(r.loss == Approx((std::log(4.0) + std::log(5.0)) / 2).epsilon(1e-6));
  // d loss / d logits = (softmax - onehot) / N
  at::Tensor expected = at::tensor({0.25f - 1, 0.75f, 0.0f, 0.4f, 0.4f, 0.2f - 1}).view({2, 3}) / 2;
  CHECK((r.grad - expected).abs().max().item<double>() < 1e-7);
}

TEST_CASE("fused cross_entropy: NaN and inf logits give a NaN loss", "[train][loss]") {
  const float bad =
      GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity());
  at::Tensor logits = at::zeros({4, 20});
  logits[2][13] = bad;
  at::Tensor targets = at::zeros({4}, at::kLong);
  CHECK(std::isnan(cross_entropy(logits, targets).item<double>()));
  CHECK(std::isnan(at::cross_entropy_loss(logits, targets).item<double>()));  // as ATen's
}

TEST_CASE("fused cross_entropy: bad targets and shapes are errors that say so", "[train][loss]") {
  at::Tensor logits = at::zeros({3, 10});
  CHECK_THROWS_WITH(cross_entropy(logits, at::tensor({int64_t{1}, int64_t{10}, int64_t{0}})),
                    Catch::Matchers::Contains("target 10 at row 1 is outside [0, 10)"));
  CHECK_THROWS_WITH(cross_entropy(logits.view({30}), at::zeros({30}, at::kLong)),
                    Catch::Matchers::Contains("expects logits [N, V] and targets [N]"));
}

TEST_CASE("fused cross_entropy: without grad, and other dtypes through ATen", "[train][loss]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor logits = at::randn({16, 40}, gen);
  at::Tensor targets = at::randint(40, {16}, gen);
  {
    at::NoGradGuard no_grad;  // the trainer's evaluate()
    CHECK(cross_entropy(logits, targets).item<double>() ==
          Approx(at::cross_entropy_loss(logits, targets).item<double>()).epsilon(1e-6));
  }
  at::Tensor d = logits.to(at::kDouble);
  CHECK(cross_entropy(d, targets).item<double>() ==
        at::cross_entropy_loss(d, targets).item<double>());
}
