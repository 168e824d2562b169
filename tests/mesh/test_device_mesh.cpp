// DeviceMesh sub-groups on a real 2x2 mesh over 4 Gloo ranks.
#include <catch2/catch.hpp>

#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"

using vescale::mesh::DeviceMesh;
namespace dist = vescale::dist;

TEST_CASE("1-D mesh over the world", "[any]") {
  auto mesh = DeviceMesh::init({{"dp", -1}});
  CHECK(mesh.size() == dist::world_size());
  CHECK(mesh.coordinate("dp") == dist::rank());
  auto t = at::ones({1});
  mesh.group("dp").all_reduce(t).wait();
  CHECK(t.item<float>() == dist::world_size());
}

TEST_CASE("2x2 mesh: coordinates and a group per dim and per dim set", "[world4]") {
  auto mesh = DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  const int r = dist::rank();
  const int dp = r / 2, tp = r % 2;  // row-major
  CHECK(mesh.coordinate() == std::vector<int64_t>{dp, tp});
  auto& g_tp = mesh.group("tp");
  auto& g_dp = mesh.group("dp");
  CHECK(g_tp.global_ranks() == std::vector<int>{2 * dp, 2 * dp + 1});
  CHECK(g_dp.global_ranks() == std::vector<int>{tp, tp + 2});
  CHECK(g_tp.rank() == tp);
  CHECK(g_dp.rank() == dp);

  auto t = at::full({1}, float(r));
  g_tp.all_reduce(t).wait();
  CHECK(t.item<float>() == 4 * dp + 1);  // 2dp + (2dp + 1)
  t = at::full({1}, float(r));
  g_dp.all_reduce(t).wait();
  CHECK(t.item<float>() == 2 * tp + 2);  // tp + (tp + 2)
  t = at::full({1}, float(r));
  mesh.group_over({"tp", "dp"}).all_reduce(t).wait();  // the fused set, in any order: 0+1+2+3
  CHECK(t.item<float>() == 6);

  // Sub-group collectives with uneven and all-to-all patterns.
  auto in = at::full({tp + 1}, float(r));  // tp rank q gives q+1 rows
  auto out = at::empty({3});
  g_tp.all_gather_uneven(out, in, {1, 2}).wait();
  CHECK(at::equal(out, at::tensor({float(2 * dp), float(2 * dp + 1), float(2 * dp + 1)})));

  auto a2a_in = at::tensor({float(10 * r), float(10 * r + 1)});  // element j goes to dp rank j
  auto a2a_out = at::empty({2});
  g_dp.all_to_all(a2a_out, a2a_in).wait();
  CHECK(at::equal(a2a_out, at::tensor({float(10 * tp + dp), float(10 * (tp + 2) + dp)})));

  auto rs_out = at::empty({1});
  g_dp.reduce_scatter(rs_out, at::tensor({float(r), float(100 * r)})).wait();
  CHECK(rs_out.item<float>() == (dp == 0 ? float(tp + tp + 2) : float(100 * (tp + tp + 2))));
}

TEST_CASE("3-D mesh with an inferred dim and size-1 dims", "[world4]") {
  auto mesh = DeviceMesh::init({{"pp", 1}, {"dp", -1}, {"tp", 2}});
  CHECK(mesh.size("dp") == 2);
  auto t = at::ones({1});
  mesh.group("pp").all_reduce(t).wait();
  CHECK(t.item<float>() == 1);
  mesh.group_over({"pp", "tp"}).all_reduce(t).wait();
  CHECK(t.item<float>() == 2);
  CHECK_THROWS_WITH(mesh.group("ep"), Catch::Matchers::Contains("no dim named 'ep'"));
}

TEST_CASE("a mesh that doesn't fit the world is rejected", "[any]") {
  CHECK_THROWS_WITH(
      DeviceMesh::init({{"dp", dist::world_size() + 1}}),
      Catch::Matchers::Contains("make the product of the dim sizes equal WORLD_SIZE"));
}

TEST_CASE("joining adjacent dims keeps the ranks and groups their product", "[world4]") {
  auto mesh = DeviceMesh::init({{"dp", 1}, {"cp", 2}, {"tp", 2}});
  const int r = dist::rank();
  const int cp = r / 2, tp = r % 2;
  auto joined = mesh.join({"dp", "cp"}, "dp");
  CHECK(joined.dim_names() == std::vector<std::string>{"dp", "tp"});
  CHECK(joined.size("dp") == 2);
  CHECK(joined.coordinate() == std::vector<int64_t>{cp, tp});
  CHECK(joined.group("dp").global_ranks() == std::vector<int>{tp, tp + 2});
  CHECK(joined.group("tp").global_ranks() == std::vector<int>{2 * cp, 2 * cp + 1});
  auto t = at::full({1}, float(r));
  joined.group("dp").all_reduce(t).wait();  // the same communicator as cp's
  CHECK(t.item<float>() == 2 * tp + 2);
  // One dim alone is a rename.
  auto renamed = mesh.join({"cp"}, "dp2");
  CHECK(renamed.dim_names() == std::vector<std::string>{"dp", "dp2", "tp"});
  CHECK(renamed.coordinate("dp2") == cp);
  CHECK_THROWS_WITH(mesh.join({"dp", "tp"}, "x"), Catch::Matchers::Contains("adjacent dims"));
}
