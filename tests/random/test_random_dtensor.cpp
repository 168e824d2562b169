// Sharded random fills equal single-device fills bit for bit: every distribution, on 1-D
// meshes and a 2x2 mesh, Shard(0), Shard(1), 2-D placements, shapes that divide and don't.
// The shards live on the world's device (cuda under VESCALE_TEST_DEVICE=cuda); the reference is
// always the CPU kernel's fill.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <functional>

#include "dtensor/dtensor_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/random/random.h"

using namespace vescale;
using namespace vescale::dtensor;
using vescale::testing::all_placements;

namespace {

using Fill = std::function<void(at::Tensor&)>;

std::vector<std::pair<std::string, Fill>> fills() {
  return {
      {"uniform", [](at::Tensor& t) { random::uniform_(t, -2.0, 5.0); }},
      {"normal", [](at::Tensor& t) { random::normal_(t, 0.5, 3.0); }},
      {"bernoulli", [](at::Tensor& t) { random::bernoulli_(t, 0.25); }},
      {"randint", [](at::Tensor& t) { random::randint_(t, 0, 1000); }},
      {"kaiming_uniform", [](at::Tensor& t) { random::kaiming_uniform_(t); }},
      {"trunc_normal", [](at::Tensor& t) { random::trunc_normal_(t, 0.0, 0.02, -0.04, 0.04); }},
      {"aten normal_", [](at::Tensor& t) { t.normal_(0.0, 1.0); }},  // the aten op on a DTensor
  };
}

void check_fills(const mesh::DeviceMesh& mesh, std::vector<int64_t> shape) {
  for (auto& [name, fill] : fills()) {
    random::manual_seed(99);
    at::Tensor ref = at::zeros(shape);  // on the CPU, whatever the world's device
    if (name == "aten normal_")
      random::normal_(ref, 0.0, 1.0);  // plain tensors take our function
    else
      fill(ref);
    const auto after = random::get_state();
    // trunc_normal_ has no aten op to reduce a Partial first; the others take Partial too.
    for (auto& p :
         all_placements(mesh, static_cast<int64_t>(shape.size()), name != "trunc_normal")) {
      INFO(name << " " << c10::IntArrayRef(shape) << " " << to_string(p));
      random::manual_seed(99);
      at::Tensor dt = distribute_tensor(at::zeros(shape, vescale::testing::device()), mesh, p);
      fill(dt);
      CHECK(at::equal(full_tensor(dt).cpu(), ref));  // bitwise
      CHECK(random::get_state().offset == after.offset);
    }
  }
}

}  // namespace

TEST_CASE("sharded random fills equal the single-device fill bitwise (1-D mesh)",
          "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  check_fills(mesh, {8, 6});
  check_fills(mesh, {7, 5});
  check_fills(mesh, {3, 2});  // fewer rows than ranks at world 4
}

TEST_CASE("sharded random fills equal the single-device fill bitwise (2x2 mesh)", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  check_fills(mesh, {8, 6});
  check_fills(mesh, {5, 3});
}

TEST_CASE("dropout masks agree in forward and backward", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto x = vescale::testing::full_randn({9, 7}, 5);
  random::manual_seed(4);
  auto xr = x.clone().requires_grad_(true);
  auto yr = random::dropout(xr, 0.4);
  yr.sum().backward();
  for (auto& p : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Replicate()}}) {
    INFO(to_string(p));
    // our function, and the aten dropout that model code calls
    for (int via_aten = 0; via_aten < 2; ++via_aten) {
      random::manual_seed(4);
      auto xd = distribute_tensor(x, mesh, p).requires_grad_(true);
      auto yd = via_aten ? at::dropout(xd, 0.4, true) : random::dropout(xd, 0.4);
      yd.sum().backward();
      CHECK(at::equal(full_tensor(yd), yr));
      CHECK(at::equal(full_tensor(xd.grad()), xr.grad()));
    }
  }
}
