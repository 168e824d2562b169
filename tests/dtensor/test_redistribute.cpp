// Every redistribute transition, forward and backward, on a 1-D mesh of 4 (or 2) and a 2x2
// mesh, with even and uneven shapes: the result's local shard must equal the slice of the
// full tensor that torch.chunk gives, and its full value must equal the source's.
#include <catch2/catch.hpp>

#include "vescale/dist/process_group.h"

#include "dtensor/dtensor_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

using namespace vescale;
using namespace vescale::dtensor;
using vescale::testing::all_placements;
using vescale::testing::full_randn;
using vescale::testing::make_input;

namespace {

// The slice of `full` this rank should hold under `p` (Partial: any split; checked by value).
at::Tensor expected_local(const at::Tensor& full, const mesh::DeviceMesh& mesh,
                          const Placements& p) {
  DTensorSpec s{mesh, p, full.sizes().vec(), full.scalar_type()};
  s.validate_and_normalize();
  auto off = s.local_offset();
  auto shape = s.local_shape();
  at::Tensor t = full;
  for (int64_t d = 0; d < full.dim(); ++d) t = t.narrow(d, off[d], shape[d]);
  return t;
}

void check_all_transitions(const mesh::DeviceMesh& mesh, std::vector<int64_t> shape) {
  auto full = full_randn(shape, 7);
  auto choices = all_placements(mesh, static_cast<int64_t>(shape.size()), true);
  for (auto& src : choices) {
    for (auto& dst : choices) {
      INFO("shape " << c10::IntArrayRef(shape) << " " << to_string(src) << " -> "
                    << to_string(dst));
      auto x = make_input(full, mesh, src).detach().requires_grad_(true);
      auto y = redistribute(x, dst);
      CHECK(spec_of(y).placements == dst);
      CHECK(y.sizes() == full.sizes());
      bool dst_partial = false;
      for (auto& p : dst) dst_partial |= p.is_partial();
      if (!dst_partial)
        CHECK(at::allclose(to_local(y), expected_local(full, mesh, dst), 1e-5, 1e-6));
      CHECK(at::allclose(full_tensor(y), full, 1e-5, 1e-6));
      // Backward: d sum(y * g) / dx = g, whatever the placements.
      auto g = full_randn(shape, 11);
      auto gd = distribute_tensor(g, mesh, Placements(mesh.ndim(), Replicate()));
      (y * gd).sum().backward();
      REQUIRE(x.grad().defined());
      CHECK(at::allclose(full_tensor(x.grad()), g, 1e-5, 1e-6));
    }
  }
}

}  // namespace

TEST_CASE("redistribute: every transition on a 1-D mesh, even and uneven", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const int64_t w = mesh.size();
  check_all_transitions(mesh, {2 * w, 3});  // even
  check_all_transitions(
      mesh, {w + 1, w - 1});  // uneven, some ranks empty along dim 1 when w=4? no: chunk of 3
  check_all_transitions(mesh, {3, 1});  // fewer rows than ranks
}

TEST_CASE("redistribute: every transition on a 2x2 mesh", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  check_all_transitions(mesh, {4, 6});
  check_all_transitions(mesh, {5, 3});
}

TEST_CASE("redistribute uses the named collectives", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", 4}});
  auto full = full_randn({8, 4}, 3);
  const auto x = distribute_tensor(full, mesh, {Shard(0)});
  const auto replicated = distribute_tensor(full, mesh, {Replicate()});
  auto p = from_local(full.clone(), mesh, {Partial()});  // every rank holds `full`: the sum is 4x
  // The collectives one redistribute issued: exactly the one its transition names.
  auto issued = [](auto&& f) {
    const auto before = dist::collective_stats();
    auto out = f();
    const auto after = dist::collective_stats();
    return std::pair{out, dist::CollectiveStats{after.all_reduce - before.all_reduce,
                                                after.all_gather - before.all_gather,
                                                after.reduce_scatter - before.reduce_scatter,
                                                after.all_to_all - before.all_to_all,
                                                after.broadcast - before.broadcast,
                                                after.send_recv - before.send_recv}};
  };
  // Shard(0) -> Shard(1) is one all-to-all: the result matches the column slice.
  auto [y, a2a] = issued([&] { return redistribute(x, {Shard(1)}); });
  CHECK(at::equal(to_local(y), full.narrow(1, mesh.coordinate()[0], 1)));
  CHECK(a2a.all_to_all == 1);
  CHECK(a2a.total() == 1);
  // Partial -> Shard(0) is one reduce-scatter.
  auto [s, rs] = issued([&] { return redistribute(p, {Shard(0)}); });
  CHECK(at::allclose(to_local(s), full.narrow(0, 2 * mesh.coordinate()[0], 2) * 4));
  CHECK(rs.reduce_scatter == 1);
  CHECK(rs.total() == 1);
  // Shard(0) -> Replicate is one all-gather; Partial -> Replicate one all-reduce.
  auto [g, ag] = issued([&] { return redistribute(x, {Replicate()}); });
  CHECK(at::equal(to_local(g), full));
  CHECK(ag.all_gather == 1);
  CHECK(ag.total() == 1);
  auto [sum, ar] = issued([&] { return redistribute(p, {Replicate()}); });
  CHECK(at::allclose(to_local(sum), full * 4));
  CHECK(ar.all_reduce == 1);
  CHECK(ar.total() == 1);
  // Replicate -> Partial(sum) and Replicate -> Shard are local: no collective at all.
  auto [r, none] = issued([&] { return redistribute(replicated, {Partial()}); });
  CHECK(at::equal(to_local(r), mesh.coordinate()[0] == 0 ? full : at::zeros_like(full)));
  CHECK(none.total() == 0);
  auto [cut, none2] = issued([&] { return redistribute(replicated, {Shard(0)}); });
  CHECK(at::equal(to_local(cut), full.narrow(0, 2 * mesh.coordinate()[0], 2)));
  CHECK(none2.total() == 0);
}

TEST_CASE("from_local infers uneven global shapes and checks them", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", 4}});
  const int64_t c = mesh.coordinate()[0];
  // torch.chunk(10 rows, 4) = 3, 3, 3, 1
  auto local = at::full({c == 3 ? 1 : 3, 2}, float(c));
  auto dt = from_local(local, mesh, {Shard(0)});
  CHECK(dt.sizes() == c10::IntArrayRef({10, 2}));
  auto full = full_tensor(dt);
  CHECK(full[9][0].item<float>() == 3);
  CHECK(full[4][1].item<float>() == 1);
  CHECK_THROWS_WITH(from_local(at::ones({2, 2}), mesh, {Shard(0)}, std::vector<int64_t>{10, 2}),
                    Catch::Matchers::Contains("gives it"));
}
