// AdamW on DTensor parameters: the fused kernel on each rank's shard must give what it gives on
// the whole tensor, for even, uneven and replicated placements, to the last bit or so (the
// kernel's vector body and scalar tail round differently, and a shard moves elements between
// them); a gradient placed otherwise than its parameter (Partial) takes the op loop and still
// matches.
#include <catch2/catch.hpp>

#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/optim/adamw.h"

using namespace vescale;
using namespace vescale::dtensor;

namespace {
at::Tensor grad_at(int64_t k, int step, at::IntArrayRef shape) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 * k + step);
  return at::randn(shape, gen);
}
}  // namespace

TEST_CASE("AdamW steps DTensor parameters on their shards like whole tensors", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const int world = dist::world_size();
  // (shape, parameter placement, gradient placement): an uneven Shard(0), a Shard(1), a
  // Replicate, and a Replicate parameter whose gradient stays Partial.
  struct Case {
    std::vector<int64_t> shape;
    Placement param, grad;
  };
  const std::vector<Case> cases{{{2 * world + 1, 5}, Shard(0), Shard(0)},
                                {{3, 4 * world}, Shard(1), Shard(1)},
                                {{6}, Replicate(), Replicate()},
                                {{4, 3}, Replicate(), Partial()}};
  optim::NamedParams ours, ref;
  for (size_t k = 0; k < cases.size(); ++k) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + k);
    const at::Tensor full = at::randn(cases[k].shape, gen);
    ours.emplace_back("p" + std::to_string(k),
                      distribute_tensor(full, mesh, {cases[k].param}).requires_grad_(true));
    ref.emplace_back("p" + std::to_string(k), full.clone().requires_grad_(true));
  }
  const optim::AdamWOptions o{.lr = 0.05, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
  optim::AdamW opt({{ours, 0.1}}, o), ref_opt({{ref, 0.1}}, o);
  for (int step = 1; step <= 4; ++step) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const at::Tensor g = grad_at(static_cast<int64_t>(k), step, cases[k].shape);
      ref[k].second.mutable_grad() = g;
      // A Partial gradient: each rank holds g / world, summing to g.
      ours[k].second.mutable_grad() = cases[k].grad.is_partial()
                                          ? from_local(g / world, mesh, {Partial()}, cases[k].shape)
                                          : distribute_tensor(g, mesh, {cases[k].grad});
    }
    opt.step();
    ref_opt.step();
    for (size_t k = 0; k < cases.size(); ++k) {
      INFO("step " << step << ", parameter " << k << " "
                   << to_string(spec_of(ours[k].second).placements));
      const at::Tensor got = full_tensor(ours[k].second.detach()), want = ref[k].second.detach();
      const double diff = (got - want).abs().max().item<double>();
      INFO("max abs diff " << diff);
      // The op loop (another rounding order, and g / world summed) or the fused kernel on a shard.
      CHECK(diff <=
            (cases[k].grad.is_partial() ? 1e-6 : 1e-7) * (1 + want.abs().max().item<double>()));
      if (cases[k].param.is_replicate() && !cases[k].grad.is_partial())
        CHECK(at::equal(got, want));  // the same elements
      CHECK(spec_of(ours[k].second).placements == Placements{cases[k].param});
    }
  }
  // The moments stay DTensors in the parameters' placements and equal the whole-tensor ones.
  const auto state = opt.state_tensors(), ref_state = ref_opt.state_tensors();
  for (size_t k = 0; k + 1 < cases.size(); ++k) {
    const std::string name = "p" + std::to_string(k) + ".exp_avg_sq";
    CHECK(spec_of(state.at(name)).placements == Placements{cases[k].param});
    CHECK(at::allclose(full_tensor(state.at(name)), ref_state.at(name), 1e-6, 1e-9));
  }
  // The shard path runs no DTensor op at all (the first step makes the moments, zeros_like).
  optim::AdamW sharded_only({{optim::NamedParams(ours.begin(), ours.end() - 1), 0.1}}, o);
  ours.back().second.mutable_grad() = at::Tensor();
  sharded_only.step();
  reset_dispatch_stats();
  sharded_only.step();
  CHECK(dispatch_stats().calls == 0);
}
