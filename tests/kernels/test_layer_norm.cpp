// vescale::kernels::layer_norm (its own CPU fp32 row kernel) against a float64 reference and ATen's
// layer_norm, at every SIMD level this CPU has; the module keeps torch::nn::LayerNorm's parameters.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "vescale/kernels/simd_level.h"
#include "vescale/models/shared/layer_norm.h"
#include "vescale/kernels/layer_norm.h"

namespace {
struct Grads {
  at::Tensor y, dx, dw, db;
};

template <class F>
Grads run(F&& f, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
          const at::Tensor& g) {
  at::Tensor xl = x.clone().set_requires_grad(true), wl = w.clone().set_requires_grad(true),
             bl = b.clone().set_requires_grad(true);
  at::Tensor y = f(xl, wl, bl);
  y.backward(g);
  return {y.detach(), xl.grad(), wl.grad(), bl.grad()};
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs().max() /
          b.to(at::kDouble).abs().max().clamp_min(1e-30))
      .item<double>();
}
}  // namespace

TEST_CASE("layer_norm and its gradients equal a float64 reference and ATen's",
          "[models][layer_norm]") {
  // C with tails past the 8- and 16-wide blocks; rows over several parallel chunks.
  auto [rows, C] =
      GENERATE(std::make_tuple(3, 7), std::make_tuple(200, 37), std::make_tuple(130, 384));
  const auto level =
      GENERATE(vescale::kernels::SimdLevel::scalar, vescale::kernels::SimdLevel::avx2, vescale::kernels::SimdLevel::avx512);
  vescale::kernels::force_simd_level(level);
  CAPTURE(rows, C, static_cast<int>(vescale::kernels::simd_level()));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  // A large common offset per row: a one-pass variance would lose its digits to cancellation.
  const at::Tensor x = (at::randn({2, rows, C}, gen) + 20).contiguous(), w = at::randn({C}, gen),
                   b = at::randn({C}, gen), g = at::randn({2, rows, C}, gen);
  auto ln = [](const at::Tensor& t, const at::Tensor& wt, const at::Tensor& bt) {
    return vescale::kernels::layer_norm(t, wt, bt, 1e-5);
  };
  auto aten = [](const at::Tensor& t, const at::Tensor& wt, const at::Tensor& bt) {
    return at::layer_norm(t, {t.size(-1)}, wt, bt, 1e-5);
  };
  const Grads ours = run(ln, x, w, b, g), ref32 = run(aten, x, w, b, g);
  const Grads exact =
      run(aten, x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble), g.to(at::kDouble));
  CAPTURE(max_rel(ours.y, exact.y), max_rel(ref32.y, exact.y), max_rel(ours.dx, exact.dx),
          max_rel(ref32.dx, exact.dx), max_rel(ours.dw, exact.dw), max_rel(ref32.dw, exact.dw));
  CHECK(max_rel(ours.y, exact.y) <= 1e-6);
  CHECK(max_rel(ours.dx, exact.dx) <= 1e-5);
  CHECK(max_rel(ours.dw, exact.dw) <= 1e-5);
  CHECK(max_rel(ours.db, exact.db) <= 1e-5);
  CHECK(max_rel(ours.y, ref32.y) <= 1e-5);
  CHECK(max_rel(ours.dx, ref32.dx) <= 1e-4);
  vescale::kernels::reset_simd_level();
}

TEST_CASE("layer_norm gives the same bits on 3 threads as on 1", "[models][layer_norm]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  const at::Tensor x = at::randn({700, 96}, gen), w = at::randn({96}, gen),
                   b = at::randn({96}, gen), g = at::randn({700, 96}, gen);
  auto ln = [](const at::Tensor& t, const at::Tensor& wt, const at::Tensor& bt) {
    return vescale::kernels::layer_norm(t, wt, bt, 1e-5);
  };
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const Grads one = run(ln, x, w, b, g);
  at::set_num_threads(3);
  const Grads three = run(ln, x, w, b, g);
  at::set_num_threads(before);
  CHECK(at::equal(one.y, three.y));
  CHECK(at::equal(one.dx, three.dx));
  CHECK(at::equal(one.dw, three.dw));
  CHECK(at::equal(one.db, three.db));
}

TEST_CASE(
    "layer_norm hands other inputs to at::layer_norm, and the module keeps LayerNorm's parameters",
    "[models][layer_norm]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor x = at::randn({4, 10}, gen).to(at::kDouble),
                   w = at::randn({10}, gen).to(at::kDouble),
                   b = at::randn({10}, gen).to(at::kDouble);
  CHECK(at::equal(vescale::kernels::layer_norm(x, w, b, 1e-5), at::layer_norm(x, {10}, w, b, 1e-5)));

  vescale::models::LayerNorm m(torch::nn::LayerNormOptions({10}).eps(1e-6));
  const auto names = m->named_parameters().keys();
  CHECK(names == std::vector<std::string>{"weight", "bias"});
  torch::NoGradGuard no_grad;
  m->weight.copy_(at::randn({10}, gen));
  m->bias.copy_(at::randn({10}, gen));
  const at::Tensor xf = at::randn({3, 5, 10}, gen);
  const at::Tensor want = at::layer_norm(xf.to(at::kDouble), {10}, m->weight.to(at::kDouble),
                                         m->bias.to(at::kDouble), 1e-6);
  CHECK(max_rel(m->forward(xf), want) <= 1e-6);
  // A two-dimensional normalized shape is torch's own LayerNorm.
  vescale::models::LayerNorm m2(torch::nn::LayerNormOptions({5, 10}));
  CHECK(at::equal(m2->forward(xf), at::layer_norm(xf, {5, 10}, m2->weight, m2->bias, 1e-5)));
}
