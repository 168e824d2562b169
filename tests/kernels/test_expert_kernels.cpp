// The mixture-of-experts kernels: grouped_mm equals a loop of per-expert matmuls, forward and
// backward (empty groups included); grouping, the capacity rule and the combine against values
// worked out by hand.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "vescale/kernels/expert_routing.h"
#include "vescale/kernels/grouped_mm.h"

namespace k = vescale::kernels;

namespace {
// The reference: one at::linear per group, concatenated (what Mixtral's experts did before).
at::Tensor loop_mm(const at::Tensor& x, const at::Tensor& w, const std::vector<int64_t>& counts) {
  std::vector<at::Tensor> ys;
  int64_t start = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    ys.push_back(at::linear(x.narrow(0, start, counts[e]), w[static_cast<int64_t>(e)]));
    start += counts[e];
  }
  return at::cat(ys);
}
}  // namespace

TEST_CASE("grouped_mm equals the per-expert loop, forward and backward", "[kernels][moe]") {
  at::manual_seed(1);
  const std::vector<int64_t> counts = GENERATE(std::vector<int64_t>{3, 0, 5, 1},
                                               std::vector<int64_t>{0, 0, 9, 0},
                                               std::vector<int64_t>{0, 0, 0, 0});
  int64_t rows = 0;
  for (auto c : counts) rows += c;
  auto x = at::randn({rows, 6}, at::kDouble), w = at::randn({4, 5, 6}, at::kDouble);
  auto up = at::randn({rows, 5}, at::kDouble);
  auto x1 = x.clone().set_requires_grad(true), w1 = w.clone().set_requires_grad(true);
  auto x2 = x.clone().set_requires_grad(true), w2 = w.clone().set_requires_grad(true);
  auto y1 = k::grouped_mm(x1, w1, counts);
  auto y2 = rows ? loop_mm(x2, w2, counts) : at::zeros({0, 5}, at::kDouble);
  CHECK(at::allclose(y1, y2, 1e-12, 1e-12));
  // One autograd node for every group, not one per expert.
  if (rows) CHECK(y1.grad_fn()->next_edges().size() == 2);
  (y1 * up).sum().backward();
  if (rows) {
    (y2 * up).sum().backward();
    CHECK(at::allclose(x1.grad(), x2.grad(), 1e-12, 1e-12));
    CHECK(at::allclose(w1.grad(), w2.grad(), 1e-12, 1e-12));
  }
  // An expert without rows has a zero gradient (not an undefined one).
  CHECK(w1.grad()[1].abs().max().item<double>() == 0);
}

TEST_CASE("grouped_mm rejects sizes that do not add up", "[kernels][moe]") {
  auto x = at::randn({4, 3}), w = at::randn({2, 5, 3});
  CHECK_THROWS_WITH(k::grouped_mm(x, w, {1, 2}), Catch::Contains("add up to 3 but x has 4 rows"));
  CHECK_THROWS_WITH(k::grouped_mm(x, w, {4}), Catch::Contains("1 group sizes for 2 weight"));
}

TEST_CASE("assignments are grouped by expert in token order, and capacity keeps the first ones",
          "[kernels][moe]") {
  // 5 tokens, k = 2, E = 3. Assignment a = token * 2 + choice.
  auto ids = at::tensor({0, 1, 1, 0, 0, 2, 1, 0, 0, 1}, at::kLong).view({5, 2});
  auto g = k::group_by_expert(ids, 3);
  // Expert 0: assignments 0, 3, 4, 7, 8; expert 1: 1, 2, 6, 9; expert 2: 5.
  CHECK(g.counts == std::vector<int64_t>{5, 4, 1});
  CHECK(at::equal(g.order, at::tensor({0, 3, 4, 7, 8, 1, 2, 6, 9, 5}, at::kLong)));
  // capacity_factor 1.0: ceil(1.0 * 5 tokens * 2 / 3) = 4 rows per expert.
  CHECK(k::expert_capacity(1.0, 5, 2, 3) == 4);
  auto kept = k::within_capacity(g, 4);
  CHECK(kept.counts == std::vector<int64_t>{4, 4, 1});  // expert 0 drops assignment 8 (token 4)
  CHECK(at::equal(kept.order, at::tensor({0, 3, 4, 7, 1, 2, 6, 9, 5}, at::kLong)));
  // With 3 assignments of expert 0 and 2 of expert 1 queued ahead (another rank's tokens).
  auto behind = k::within_capacity(g, 4, {3, 2, 0});
  CHECK(behind.counts == std::vector<int64_t>{1, 2, 1});
  CHECK(at::equal(behind.order, at::tensor({0, 1, 2, 5}, at::kLong)));
}

TEST_CASE("the combine sums each token's choices by gate, and a dropped choice adds nothing",
          "[kernels][moe]") {
  // 2 tokens, k = 2: assignments 0..3; the grouped rows come in the order 2, 0, 3 (1 dropped).
  auto order = at::tensor({2, 0, 3}, at::kLong);
  auto y = at::tensor({10.0, 20.0, 1.0, 2.0, 100.0, 200.0}, at::kDouble).view({3, 2});
  auto gates = at::tensor({0.25, 0.75, 0.5, 0.5}, at::kDouble).view({2, 2});
  auto out = k::combine_by_token(y, order, gates);
  // token 0: 0.25 * row of a0 (1, 2) + 0.75 * a1 (dropped) = (0.25, 0.5)
  // token 1: 0.5 * a2 (10, 20) + 0.5 * a3 (100, 200) = (55, 110)
  CHECK(at::equal(out, at::tensor({0.25, 0.5, 55.0, 110.0}, at::kDouble).view({2, 2})));
}
