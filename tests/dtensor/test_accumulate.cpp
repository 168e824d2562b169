// In-place sums of DTensors (src/dtensor/accumulate.cpp): the autograd engine adds a second
// gradient into the first one's shard when nobody else sees it, never into a shard another
// tensor still reads; add_ keeps its write-through meaning for user code.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "dtensor/dtensor_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

using namespace vescale;
using namespace vescale::dtensor;
using vescale::testing::full_randn;

namespace {

// u + w forward; backward hands out one gradient twice, as a shard and a view of that shard.
struct SumWithAliasedGrads : torch::autograd::Function<SumWithAliasedGrads> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& u,
                            const at::Tensor& w) {
    return u + w;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list g) {
    return {g[0], g[0].detach()};
  }
};

// Identity forward; backward hands out the gradient's sum broadcast back: an expanded shard.
struct ExpandedGrad : torch::autograd::Function<ExpandedGrad> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& u) {
    return u * 1.0;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list g) {
    return {g[0].sum().expand(g[0].sizes())};
  }
};

}  // namespace

TEST_CASE("a DTensor borrows its shard storage: the count leaves the wrapper out", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto x = distribute_tensor(full_randn({4 * mesh.size(), 3}, 91), mesh, {Shard(0)});
  REQUIRE(x.has_storage());
  CHECK(x.storage().use_count() == 1);
  {
    at::Tensor local = to_local(x);  // a second handle on the shard's memory
    CHECK(x.storage().use_count() == 2);
    CHECK(local.data_ptr() == x.storage().data());
  }
  {
    at::Tensor alias = x.detach();  // another DTensor over the same shard
    CHECK(x.storage().use_count() == 2);
  }
  CHECK(x.storage().use_count() == 1);
  // A no-op redistribute under autograd returns a second wrapper over the same shard: it gets
  // its own shard handle, so both count the other (one shared handle would count 1 in each).
  auto y = distribute_tensor(full_randn({4 * mesh.size(), 3}, 89), mesh, {Shard(0)})
               .requires_grad_(true);
  CHECK(y.storage().use_count() == 1);
  auto same = redistribute(y, {Shard(0)});
  CHECK(same.storage().use_count() == 2);
  CHECK(y.storage().use_count() == 2);
  // A shard that overlaps itself (an expanded view) lends none: no in-place sum may target it.
  auto row = distribute_tensor(full_randn({1, 3}, 88), mesh, {Replicate()});
  auto expanded = row.expand({4, 3});
  CHECK_FALSE(expanded.has_storage());
  CHECK_THROWS(expanded.storage());
  // A tensor made a DTensor in place (a parameter) keeps none either.
  at::Tensor param = at::zeros({4 * mesh.size(), 3});
  become_dtensor(param, distribute_tensor(full_randn({4 * mesh.size(), 3}, 87), mesh, {Shard(0)}));
  CHECK_FALSE(param.has_storage());
  CHECK_THROWS(param.storage());
}

TEST_CASE("the autograd engine sums DTensor gradients in the first one's shard", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const auto full = full_randn({4 * mesh.size(), 6}, 92);
  const auto g_full = full_randn({4 * mesh.size(), 6}, 93);
  const auto h_full = full_randn({4 * mesh.size(), 6}, 90);
  // Reference on full tensors: y feeds two products, so its two gradients meet in one buffer.
  auto xr = full.clone().requires_grad_(true);
  auto yr = xr * 2.0;
  ((yr * h_full).sum() + (yr * 5.0 * g_full).sum()).backward();

  for (const Placements& p : {Placements{Shard(0)}, Placements{Replicate()}}) {
    auto x = distribute_tensor(full, mesh, p).requires_grad_(true);
    auto g = distribute_tensor(g_full, mesh, p);
    auto h = distribute_tensor(h_full, mesh, p);
    auto y = x * 2.0;
    auto loss = (y * h).sum() + (y * 5.0 * g).sum();
    reset_dispatch_stats();
    {
      BackwardOnCallerThread guard;
      loss.backward();
    }
    // y's two gradients have x's placements: summed in place.
    CHECK(dispatch_stats().in_place_sums == 1);
    CHECK(at::allclose(full_tensor(x.grad()), xr.grad(), 1e-6, 1e-6));
  }
}

TEST_CASE("a gradient shard another gradient still reads is summed out of place", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const auto full = full_randn({4 * mesh.size(), 5}, 94);
  const auto g_full = full_randn({4 * mesh.size(), 5}, 95);
  // c is made before the custom function, so the engine runs the function's backward first:
  // u's buffer then holds a gradient whose shard w's pending gradient (a view) shares when
  // c's gradient arrives. Summing in place there would add 4 to w's gradient too.
  auto run = [&](const at::Tensor& x, const at::Tensor& g) {
    auto w = x * 7.0;
    auto u = x * 1.5;
    auto c = u * 4.0;
    auto a = SumWithAliasedGrads::apply(u, w);
    return (a * g).sum() + c.sum();
  };
  auto xr = full.clone().requires_grad_(true);
  run(xr, g_full).backward();
  // d/dx = 1.5 (g + 4) + 7 g.
  REQUIRE(at::allclose(xr.grad(), 1.5 * (g_full + 4.0) + 7.0 * g_full, 1e-5, 1e-5));
  for (const Placements& p : {Placements{Shard(0)}, Placements{Replicate()}}) {
    auto x = distribute_tensor(full, mesh, p).requires_grad_(true);
    auto loss = run(x, distribute_tensor(g_full, mesh, p));
    {
      BackwardOnCallerThread guard;
      loss.backward();
    }
    CHECK(at::allclose(full_tensor(x.grad()), xr.grad(), 1e-6, 1e-6));
  }
}

TEST_CASE("gradients summed across placements, and into an expanded shard", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const auto full = full_randn({4 * mesh.size(), 3}, 96);
  const auto y_full = full_randn({4 * mesh.size(), 3}, 97);
  SECTION("the first gradient is an expanded scalar") {
    // As in the aliasing case, c comes first so that the expanded gradient waits in u's buffer.
    for (const Placements& p : {Placements{Shard(0)}, Placements{Replicate()}}) {
      auto x = distribute_tensor(full, mesh, p).requires_grad_(true);
      auto u = x * 1.5;
      auto c = u * 4.0;
      auto loss = ExpandedGrad::apply(u).sum() + c.sum();
      {
        BackwardOnCallerThread guard;
        loss.backward();
      }
      CHECK(at::allclose(full_tensor(x.grad()), at::full_like(full, 1.5 * (full.numel() + 4.0)),
                         1e-6, 1e-6));
    }
  }
  SECTION("a Replicate tensor's gradients in Replicate and Shard(0)") {
    // x * 2 gives a Replicate gradient; x * y with y sharded gives a Shard(0) one.
    auto x = distribute_tensor(full, mesh, {Replicate()}).requires_grad_(true);
    auto y = distribute_tensor(y_full, mesh, {Shard(0)});
    auto loss = (x * 2.0).sum() + (x * y).sum();
    {
      BackwardOnCallerThread guard;
      loss.backward();
    }

    CHECK(at::allclose(full_tensor(x.grad()), y_full + 2.0, 1e-6, 1e-6));
  }
}

TEST_CASE("add_ on a DTensor writes through to its aliases and keeps its placements", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const auto a_full = full_randn({4 * mesh.size(), 3}, 98);
  const auto b_full = full_randn({4 * mesh.size(), 3}, 99);
  at::NoGradGuard no_grad;
  SECTION("same placements: the shard itself, seen by a view and by to_local") {
    auto a = distribute_tensor(a_full, mesh, {Shard(0)});
    auto b = distribute_tensor(b_full, mesh, {Shard(0)});
    auto view = a.view({-1});
    at::Tensor local = to_local(a);
    reset_dispatch_stats();
    a.add_(b, 0.5);
    CHECK(dispatch_stats().in_place_sums == 1);
    const auto want = a_full + 0.5 * b_full;
    CHECK(at::equal(full_tensor(a), want));
    CHECK(at::equal(full_tensor(view), want.view({-1})));
    CHECK(at::equal(local, want.chunk(mesh.size(), 0)[mesh.rank()]));
  }
  SECTION("other placements: self stays Replicate") {
    auto a = distribute_tensor(a_full, mesh, {Replicate()});
    auto b = distribute_tensor(b_full, mesh, {Shard(0)});
    auto alias = a.detach();
    a.add_(b);
    CHECK(spec_of(a).placements == Placements{Replicate()});
    CHECK(at::allclose(full_tensor(a), a_full + b_full, 1e-6, 1e-6));
    CHECK(at::allclose(full_tensor(alias), a_full + b_full, 1e-6, 1e-6));
  }
}
