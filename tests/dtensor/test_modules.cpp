// Autograd through small TP-sharded blocks, written as plain single-device code: the loss and
// every parameter gradient must match the same code on full tensors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <sstream>

#include "dtensor/dtensor_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

using namespace vescale;
using namespace vescale::dtensor;
// Float64, so that reduction order (sharded vs not) doesn't blur the comparison.
at::Tensor full_randn(std::vector<int64_t> shape, uint64_t seed) {
  return vescale::testing::full_randn(std::move(shape), seed).to(at::kDouble);
}

namespace {

// Single-device code, unaware of sharding.
at::Tensor mlp(const at::Tensor& x, const std::vector<at::Tensor>& p) {
  return at::linear(at::gelu(at::linear(x, p[0], p[1])), p[2], p[3]);
}

at::Tensor attention(const at::Tensor& x, const std::vector<at::Tensor>& p, int64_t heads) {
  const int64_t B = x.size(0), S = x.size(1), D = x.size(2), hd = D / heads;
  auto split = [&](const at::Tensor& t) { return t.view({B, S, heads, hd}).transpose(1, 2); };
  auto q = split(at::linear(x, p[0])), k = split(at::linear(x, p[1])),
       v = split(at::linear(x, p[2]));
  auto o = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  return at::linear(o.transpose(1, 2).reshape({B, S, D}), p[3]);
}

struct Result {
  double loss;
  std::vector<at::Tensor> grads;
};

template <typename F>
Result run(F f, const at::Tensor& x, const std::vector<at::Tensor>& params) {
  auto y = f(x, params);
  auto loss = (y * y).mean();
  loss.backward();
  Result r{0, {}};
  at::Tensor whole = is_dtensor(loss) ? full_tensor(loss) : loss;
  r.loss = whole.template item<double>();
  for (auto& p : params) r.grads.push_back(is_dtensor(p.grad()) ? full_tensor(p.grad()) : p.grad());
  return r;
}

std::vector<at::Tensor> leaves(const std::vector<at::Tensor>& full) {
  std::vector<at::Tensor> out;
  for (auto& t : full) out.push_back(t.clone().requires_grad_(true));
  return out;
}

std::vector<at::Tensor> shard(const std::vector<at::Tensor>& full, const mesh::DeviceMesh& mesh,
                              const std::vector<Placements>& plan) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < full.size(); ++i)
    out.push_back(distribute_tensor(full[i], mesh, plan[i]).requires_grad_(true));
  return out;
}

void compare(const Result& got, const Result& want) {
  CHECK(got.loss == Approx(want.loss).epsilon(1e-12));
  for (size_t i = 0; i < want.grads.size(); ++i) {
    INFO("parameter " << i << ": max |diff| "
                      << (got.grads[i] - want.grads[i]).abs().max().item<double>());
    CHECK(at::allclose(got.grads[i], want.grads[i], 1e-10, 1e-12));
  }
}

}  // namespace

TEST_CASE("TP MLP (column then row parallel) matches single-device grads", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t w = mesh.size(), D = 6, H = 4 * w;
  std::vector<at::Tensor> full{full_randn({H, D}, 1), full_randn({H}, 2), full_randn({D, H}, 3),
                               full_randn({D}, 4)};
  auto x = full_randn({5, D}, 5);
  auto want = run(mlp, x, leaves(full));
  auto params = shard(full, mesh, {{Shard(0)}, {Shard(0)}, {Shard(1)}, {Replicate()}});
  auto got = run(mlp, distribute_tensor(x, mesh, {Replicate()}), params);
  compare(got, want);
  // The hidden activations stayed sharded: the column-parallel weight's grad is Shard(0).
  CHECK(spec_of(params[0].grad()).placements == Placements{Shard(0)});
}

TEST_CASE(
    "TP MLP on [B, S, D] with biases (aten::linear's flattened addmm) matches single-device grads",
    "[world2][world4]") {
  // For a contiguous 3-D input with a bias, aten::linear reshapes to rows and runs one addmm;
  // the row-parallel addmm gives a Partial output, so its bias must be added once, not per rank.
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t w = mesh.size(), D = 6, H = 4 * w;
  std::vector<at::Tensor> full{full_randn({H, D}, 41), full_randn({H}, 42), full_randn({D, H}, 43),
                               full_randn({D}, 44)};
  auto x = full_randn({2, 2 * w, D}, 45);
  auto want = run(mlp, x, leaves(full));
  for (const Placements& xp :
       {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(1)}}) {
    INFO("input " << xp[0].to_string());
    auto params = shard(full, mesh, {{Shard(0)}, {Shard(0)}, {Shard(1)}, {Replicate()}});
    compare(run(mlp, distribute_tensor(x, mesh, xp), params), want);
  }
}

TEST_CASE("TP attention (heads sharded) matches single-device grads", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t heads = 2 * mesh.size(), D = 3 * heads;
  std::vector<at::Tensor> full{full_randn({D, D}, 11), full_randn({D, D}, 12),
                               full_randn({D, D}, 13), full_randn({D, D}, 14)};
  auto x = full_randn({2, 5, D}, 15);
  auto f = [heads](const at::Tensor& a, const std::vector<at::Tensor>& p) {
    return attention(a, p, heads);
  };
  auto want = run(f, x, leaves(full));
  auto params = shard(full, mesh, {{Shard(0)}, {Shard(0)}, {Shard(0)}, {Shard(1)}});
  auto got = run(f, distribute_tensor(x, mesh, {Replicate()}), params);
  compare(got, want);
}

TEST_CASE("DP x TP attention on a 2x2 mesh matches single-device grads", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  const int64_t heads = 4, D = 8;
  std::vector<at::Tensor> full{full_randn({D, D}, 21), full_randn({D, D}, 22),
                               full_randn({D, D}, 23), full_randn({D, D}, 24)};
  auto x = full_randn({4, 3, D}, 25);
  auto f = [heads](const at::Tensor& a, const std::vector<at::Tensor>& p) {
    return attention(a, p, heads);
  };
  auto want = run(f, x, leaves(full));
  auto params = shard(full, mesh,
                      {{Replicate(), Shard(0)},
                       {Replicate(), Shard(0)},
                       {Replicate(), Shard(0)},
                       {Replicate(), Shard(1)}});
  auto got = run(f, distribute_tensor(x, mesh, {Shard(0), Replicate()}), params);
  compare(got, want);
}

TEST_CASE("_foreach_ updates keep each tensor's placements", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto a = full_randn({8, 3}, 31), b = full_randn({5}, 32), ga = full_randn({8, 3}, 33),
       gb = full_randn({5}, 34);
  std::vector<at::Tensor> ps{distribute_tensor(a, mesh, {Shard(0)}),
                             distribute_tensor(b, mesh, {Replicate()})};
  std::vector<at::Tensor> gs{distribute_tensor(ga, mesh, {Replicate()}),
                             distribute_tensor(gb, mesh, {Shard(0)})};
  at::_foreach_mul_(ps, 0.5);
  at::_foreach_add_(ps, gs, -2.0);
  auto sq = at::_foreach_sqrt(at::_foreach_abs(ps));
  CHECK(spec_of(ps[0]).placements == Placements{Shard(0)});
  CHECK(spec_of(sq[0]).placements == Placements{Shard(0)});
  CHECK(spec_of(ps[1]).placements == Placements{Replicate()});
  CHECK(at::allclose(full_tensor(ps[0]), a * 0.5 - 2 * ga));
  CHECK(at::allclose(full_tensor(ps[1]), b * 0.5 - 2 * gb));
  CHECK(at::allclose(full_tensor(sq[1]), (b * 0.5 - 2 * gb).abs().sqrt()));
}

TEST_CASE("DTensors report global sizes and print", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto t = distribute_tensor(at::arange(12, at::kFloat).view({4, 3}), mesh, {Shard(0)});
  CHECK(t.sizes() == c10::IntArrayRef({4, 3}));
  CHECK(t.dim() == 2);
  CHECK(t.numel() == 12);
  CHECK(t.scalar_type() == at::kFloat);
  CHECK(t.device().type() == c10::DeviceType::PrivateUse1);
  CHECK(t.device().str() == "dtensor:0");
  // A plain tensor inside a Tensor[] counts as Replicate.
  auto plain = at::ones({4, 2}, at::kFloat);
  CHECK(at::equal(full_tensor(at::cat({t, plain}, 1)),
                  at::cat({at::arange(12, at::kFloat).view({4, 3}), plain}, 1)));
  auto parts = at::split(t, 2, 1);  // along an unsharded dim: stays sharded
  CHECK(parts.size() == 2);
  CHECK(at::equal(full_tensor(parts[1]), at::arange(12, at::kFloat).view({4, 3}).narrow(1, 2, 1)));
  std::ostringstream os;
  os << full_tensor(t);
  CHECK(os.str().find("11") != std::string::npos);
  CHECK_THAT(describe(t),
             Catch::Matchers::Contains("DTensor([4, 3], Float, [Shard(0)] on DeviceMesh(x="));
  std::ostringstream direct;
  CHECK_THROWS_WITH(direct << t, Catch::Matchers::Contains("Use full_tensor(t)"));
  CHECK(at::equal(full_tensor(t.to(at::kDouble)),
                  at::arange(12, at::kDouble).view({4, 3})));  // casts stay DTensors
}
