// vescale::kernels::causal_attention (its own CPU kernel for short sequences) against a float64 reference
// written out from the definition, and against ATen's scaled_dot_product_attention.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <tuple>

#include "vescale/kernels/attention.h"
#include "vescale/kernels/simd_level.h"

namespace {
struct Result {
  at::Tensor y, dq, dk, dv;
};

// q, k, v as the models make them: head views of one [B, T, 3 H D] projection, so each head's
// rows are strided; upstream gradient g.
template <class F>
Result run(F&& attend, const at::Tensor& qkv, int64_t H, const at::Tensor& g) {
  at::Tensor leaf = qkv.detach().clone().set_requires_grad(true);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (3 * H);
  auto parts = leaf.split(H * D, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  at::Tensor y = attend(heads(parts[0]), heads(parts[1]), heads(parts[2]));
  y.backward(g);
  auto grads = leaf.grad().split(H * D, 2);
  return {y.detach(), heads(grads[0]), heads(grads[1]), heads(grads[2])};
}

at::Tensor reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = q.size(2);
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor masked = at::ones({T, T}, at::kBool).triu(1);
  return at::matmul(at::softmax(s.masked_fill(masked, -INFINITY), -1), v);
}

// Largest difference relative to the reference's largest magnitude, or absolute below 1: with
// T = 1, dq and dk are exactly 0 in exact arithmetic (P = 1) and rounding leaves ~1e-8.
double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).abs().max() /
          b.abs().max().to(at::kDouble).clamp_min(1.0))
      .item<double>();
}
}  // namespace

TEST_CASE("causal_attention and its gradients equal a float64 reference and ATen's sdpa",
          "[models][attention]") {
  // T = 1, T inside one 64-row block, T past a block edge, several blocks; head dims 8 to 64.
  auto [B, H, T, D] = GENERATE(std::make_tuple(2, 3, 1, 8), std::make_tuple(2, 3, 37, 16),
                               std::make_tuple(1, 2, 130, 32), std::make_tuple(2, 4, 128, 64));
  // Every vector width this CPU has for the softmax and dS rows (scalar, AVX2).
  const auto level = GENERATE(vescale::kernels::SimdLevel::scalar, vescale::kernels::SimdLevel::avx2);
  vescale::kernels::force_simd_level(level);
  CAPTURE(B, H, T, D, static_cast<int>(vescale::kernels::simd_level()));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor qkv = at::randn({B, T, 3 * H * D}, gen) * 2;  // scores spread enough to saturate rows
  at::Tensor g = at::randn({B, H, T, D}, gen);

  auto ours = run([](const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v) { return vescale::kernels::causal_attention(q, k, v); },
                  qkv, H, g);
  auto ref = run(reference, qkv.to(at::kDouble), H, g.to(at::kDouble));
  auto aten = run(
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
      },
      qkv, H, g);

  CHECK(max_rel(ours.y, ref.y) <= 1e-5);
  CHECK(max_rel(ours.dq, ref.dq) <= 1e-5);
  CHECK(max_rel(ours.dk, ref.dk) <= 1e-5);
  CHECK(max_rel(ours.dv, ref.dv) <= 1e-5);
  CHECK(max_rel(ours.y, aten.y) <= 1e-5);
  CHECK(max_rel(ours.dq, aten.dq) <= 1e-5);
  CHECK(max_rel(ours.dk, aten.dk) <= 1e-5);
  CHECK(max_rel(ours.dv, aten.dv) <= 1e-5);
  // The first query sees only the first key: its output is v's first row exactly.
  CHECK(ours.y.select(2, 0).equal(qkv.narrow(2, 2 * H * D, H * D).select(1, 0).view({B, H, D})));
  // Heads come out interleaved per token, so merging them back is a view.
  CHECK(ours.y.transpose(1, 2).is_contiguous());
  vescale::kernels::reset_simd_level();
}

TEST_CASE("causal_attention without grad gives the same values", "[models][attention]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor q = at::randn({2, 2, 70, 16}, gen), k = at::randn({2, 2, 70, 16}, gen),
             v = at::randn({2, 2, 70, 16}, gen);
  at::Tensor with_grad = vescale::kernels::causal_attention(q.requires_grad_(), k, v).detach();
  at::NoGradGuard no_grad;
  CHECK(vescale::kernels::causal_attention(q, k, v).equal(with_grad));
}

TEST_CASE("causal_attention takes expanded and permuted inputs", "[models][attention]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  // k shared by every head (stride 0), v with one row repeated over T (stride 0), q with D not
  // innermost.
  at::Tensor q = at::randn({2, 3, 16, 24}, gen).transpose(2, 3),
             k = at::randn({2, 1, 24, 16}, gen).expand({2, 3, 24, 16}),
             v = at::randn({2, 3, 1, 16}, gen).expand({2, 3, 24, 16});
  at::Tensor ours = vescale::kernels::causal_attention(q, k, v);
  at::Tensor ref = reference(q.to(at::kDouble), k.to(at::kDouble), v.to(at::kDouble));
  CHECK(max_rel(ours, ref) <= 1e-5);
}

TEST_CASE("causal_attention hands other inputs to at::scaled_dot_product_attention",
          "[models][attention]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
  at::Tensor q = at::randn({1, 2, 20, 8}, gen, at::kDouble),
             k = at::randn({1, 2, 20, 8}, gen, at::kDouble),
             v = at::randn({1, 2, 20, 8}, gen, at::kDouble);
  // float64: ATen's kernel, bit for bit.
  CHECK(vescale::kernels::causal_attention(q, k, v).equal(
      at::scaled_dot_product_attention(q, k, v, {}, 0.0, true)));
  // Probabilities over 64 MB ([1, 1, 4200, 4200] floats): flash attention's O(T) memory instead.
  at::Tensor ql = at::randn({1, 1, 4200, 4}, gen), kl = at::randn({1, 1, 4200, 4}, gen),
             vl = at::randn({1, 1, 4200, 4}, gen);
  CHECK(vescale::kernels::causal_attention(ql, kl, vl)
            .equal(at::scaled_dot_product_attention(ql, kl, vl, {}, 0.0, true)));
}

TEST_CASE("causal_attention splits heads over threads with the same bits as one thread",
          "[models][attention]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
  at::Tensor qkv = at::randn({3, 50, 3 * 5 * 16}, gen), g = at::randn({3, 5, 50, 16}, gen);
  auto attend = [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return vescale::kernels::causal_attention(q, k, v);
  };
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  auto one = run(attend, qkv, 5, g);
  at::set_num_threads(3);
  auto three = run(attend, qkv, 5, g);
  at::set_num_threads(threads);
  CHECK(three.y.equal(one.y));
  CHECK(three.dq.equal(one.dq));
  CHECK(three.dk.equal(one.dk));
  CHECK(three.dv.equal(one.dv));
}

TEST_CASE("causal_attention_packed equals splitting the heads and causal_attention, bit for bit",
          "[models][attention]") {
  // The kernel's path (fp32) and ATen's (float64); T across a block edge.
  const auto dtype = GENERATE(at::kFloat, at::kDouble);
  const int64_t B = 2, T = 45, H = 3, D = 16, C = H * D;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  const at::Tensor qkv = at::randn({B, T, 3 * C}, gen).to(dtype),
                   g = at::randn({B, T, C}, gen).to(dtype);

  at::Tensor packed_leaf = qkv.clone().set_requires_grad(true);
  at::Tensor y_packed = vescale::kernels::causal_attention_packed(packed_leaf, H);
  y_packed.backward(g);

  at::Tensor split_leaf = qkv.clone().set_requires_grad(true);
  auto parts = split_leaf.split(C, 2);
  auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  at::Tensor y_split = vescale::kernels::causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]))
                           .transpose(1, 2)
                           .reshape({B, T, C});
  y_split.backward(g);

  CHECK(y_packed.sizes() == at::IntArrayRef{B, T, C});
  CHECK(at::equal(y_packed, y_split));
  CHECK(at::equal(packed_leaf.grad(), split_leaf.grad()));
  // And both are attention: against the float64 definition.
  at::Tensor want = reference(heads(qkv.split(C, 2)[0]).to(at::kDouble),
                              heads(qkv.split(C, 2)[1]).to(at::kDouble),
                              heads(qkv.split(C, 2)[2]).to(at::kDouble))
                        .transpose(1, 2)
                        .reshape({B, T, C});
  CHECK((y_packed.to(at::kDouble) - want).abs().max().item<double>() <= 1e-5);
  CHECK_THROWS_WITH(vescale::kernels::causal_attention_packed(at::zeros({B, T, 3 * C + 1}), H),
                    Catch::Contains("qkv must be [B, T, 3C]"));
}
