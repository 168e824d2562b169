// vescale::kernels::gelu_tanh (x * sigmoid(2u), forward keeps only x) against a float64 reference, against
// ATen's gelu(x, "tanh") and gelu_backward, and against values worked out by hand.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <cmath>

#include "vescale/kernels/simd_level.h"
#include "vescale/kernels/gelu.h"

namespace {
struct ValueAndGrad {
  at::Tensor y, grad;
};

template <class F>
ValueAndGrad run(F&& f, const at::Tensor& x, const at::Tensor& upstream) {
  at::Tensor leaf = x.detach().clone().set_requires_grad(true);
  at::Tensor y = f(leaf);
  y.backward(upstream);
  return {y.detach(), leaf.grad()};
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}
}  // namespace

TEST_CASE("gelu_tanh equals at::gelu(tanh) and its gradient equals ATen's gelu_backward",
          "[models][gelu]") {
  // Sizes with a tail past the last 8-wide block, and one split over several parallel chunks.
  const int64_t n = GENERATE(7, 1000, 100003);
  // Every vector width this CPU has (the scalar loop, AVX2, AVX-512).
  const auto level =
      GENERATE(vescale::kernels::SimdLevel::scalar, vescale::kernels::SimdLevel::avx2, vescale::kernels::SimdLevel::avx512);
  vescale::kernels::force_simd_level(level);
  CAPTURE(n, static_cast<int>(level), static_cast<int>(vescale::kernels::simd_level()));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor x = at::randn({n}, gen) * 3;  // |x| up to ~12: tanh saturates at both ends
  x[0] = 0.0;
  at::Tensor upstream = at::randn({n}, gen);
  auto ours = run([](const at::Tensor& t) { return vescale::kernels::gelu_tanh(t); }, x, upstream);
  auto aten = run([](const at::Tensor& t) { return at::gelu(t, "tanh"); }, x, upstream);
  // The exact value: ATen's formula in float64.
  auto exact = run([](const at::Tensor& t) { return at::gelu(t, "tanh"); }, x.to(at::kDouble),
                   upstream.to(at::kDouble));
  const double y_err = max_rel(ours.y.to(at::kDouble), exact.y),
               grad_err = max_rel(ours.grad.to(at::kDouble), exact.grad);
  CAPTURE(y_err, grad_err, max_rel(aten.y.to(at::kDouble), exact.y),
          max_rel(aten.grad.to(at::kDouble), exact.grad));
  // Within a few float32 roundings of the exact value (ATen's own float32 gradient is off by up
  // to 6e-7 here), and close to ATen's float32 result.
  CHECK(y_err <= 2e-7);
  CHECK(grad_err <= 5e-7);
  CHECK(max_rel(ours.y, aten.y) <= 2e-6);
  CHECK(max_rel(ours.grad, aten.grad) <= 2e-6);
  CHECK(ours.y[0].item<float>() == 0.0f);
  vescale::kernels::reset_simd_level();
}

TEST_CASE("gelu_tanh on a [B, T, C] activation, by hand at three points", "[models][gelu]") {
  // y = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), y' = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 *
  // 0.044715 x^2)
  at::Tensor x = at::tensor({0.0f, 1.0f, -2.0f}).repeat({2, 4, 1});  // [2, 4, 3]
  auto r = run([](const at::Tensor& t) { return vescale::kernels::gelu_tanh(t); }, x, at::ones_like(x));
  const double k = std::sqrt(2.0 / M_PI);
  for (int i = 0; i < 3; ++i) {
    const double v = x[0][0][i].item<double>(), t = std::tanh(k * (v + 0.044715 * v * v * v));
    CHECK(r.y[1][3][i].item<double>() == Approx(0.5 * v * (1 + t)).margin(1e-6));
    CHECK(r.grad[1][3][i].item<double>() ==
          Approx(0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v))
              .margin(1e-6));
  }
}

TEST_CASE("gelu_tanh gives the same bits without grad, and other dtypes are at::gelu itself",
          "[models][gelu]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  at::Tensor x = at::randn({33}, gen) * 3;
  at::Tensor with_grad = vescale::kernels::gelu_tanh(x.clone().set_requires_grad(true)).detach();
  CHECK(at::equal(vescale::kernels::gelu_tanh(x), with_grad));
  {
    at::NoGradGuard no_grad;
    CHECK(at::equal(vescale::kernels::gelu_tanh(x.clone().set_requires_grad(true)), with_grad));
  }
  CHECK(max_rel(vescale::kernels::gelu_tanh(x), at::gelu(x, "tanh")) <= 2e-6);
  at::Tensor d = x.to(at::kDouble).set_requires_grad(true);
  CHECK(at::equal(vescale::kernels::gelu_tanh(d), at::gelu(d, "tanh")));
}
