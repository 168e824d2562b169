// The aten random ops on DTensors: each rank fills its shard with the values the
// single-device tensor has there (its global indices), from the shared stream.
#include <ATen/ATen.h>

#include "vescale/dtensor/sharding_rule.h"
#include "random/kernels.h"
#include "vescale/common/check.h"

namespace vescale::random {

namespace {

using dtensor::OpCall;
using dtensor::Placement;
using dtensor::Placements;
using dtensor::Strategy;

// Where this rank's shard sits in the global tensor it fills. Shards stay; Partial becomes
// Replicate (every rank of the group draws the same values).
struct FillRegion {
  Placements placements;
  std::vector<int64_t> global, offset;
  int64_t numel;
};

FillRegion fill_region_of(const dtensor::DTensorSpec& s) {
  Placements p = s.placements;
  for (auto& q : p)
    if (q.is_partial()) q = Placement::replicate();
  const auto offset = dtensor::DTensorSpec{s.mesh, p, s.shape, s.dtype}.local_offset();
  return {p, s.shape, offset, c10::multiply_integers(s.shape)};
}

// In-place fills: uniform_(self, from, to, gen), normal_(self, mean, std, gen),
// bernoulli_.float(self, p, gen), random_.from(self, from, to, gen).
Strategy fill(const OpCall& call, Dist dist) {
  const auto [p, global, offset, numel] = fill_region_of(call.specs[0]);
  const size_t n_args = call.op.schema().arguments().size();
  Strategy st;
  st.inputs.assign(call.specs.size(), dtensor::replicate_all(call.mesh_ndim()));
  st.inputs[0] = p;
  st.outputs = {p};
  st.output_shapes = {global};
  st.local_fn = [=](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, n_args);
    at::Tensor out = a[0].toTensor();
    DistParams params{dist, 0, 1};
    if (dist == Dist::Bernoulli) {
      params.a = a[1].toDouble();
    } else if (dist == Dist::RandInt) {
      params.a = static_cast<double>(a[1].toInt());
      VESCALE_CHECK(!a[2].isNone(), "DTensor: random_ needs an upper bound; use random::randint_");
      params.b = static_cast<double>(a[2].toInt());
    } else {
      params.a = a[1].toDouble();
      params.b = a[2].toDouble();
    }
    torch::jit::drop(stack, n_args);
    auto [seed, base] = reserve(numel);
    fill_region(out, global, offset, seed, base, params);
    stack.emplace_back(out);
  };
  return st;
}

// native_dropout(input, p, train?) -> (output, mask): the mask comes from the stream; the
// output is linear in the input, so a Partial input stays Partial.
Strategy native_dropout(const OpCall& call) {
  const auto& x = call.specs[0];
  const auto [mask_p, global, offset, numel] = fill_region_of(x);
  Strategy st;
  st.inputs = {x.placements};
  st.outputs = {x.placements, mask_p};
  st.output_shapes = {global, global};
  st.local_fn = [=](torch::jit::Stack& stack) {
    auto a = torch::jit::last(stack, 3);
    at::Tensor in = a[0].toTensor();
    const double p = a[1].toDouble();
    const bool train = a[2].isNone() || a[2].toBool();
    torch::jit::drop(stack, 3);
    if (!train || p == 0) {
      stack.emplace_back(in.clone());
      stack.emplace_back(at::ones(in.sizes(), in.options().dtype(at::kBool)));
      return;
    }
    at::Tensor keep = at::empty(in.sizes(), in.options());
    auto [seed, base] = reserve(numel);
    fill_region(keep, global, offset, seed, base, DistParams{Dist::Bernoulli, 1.0 - p, 0});
    stack.emplace_back(p == 1 ? at::zeros_like(in) : in * keep * (1.0 / (1.0 - p)));
    stack.emplace_back(keep.to(at::kBool));
  };
  return st;
}

struct Registrar {
  Registrar() {
    dtensor::register_rule("aten::uniform_",
                           [](const OpCall& c) { return fill(c, Dist::Uniform); });
    dtensor::register_rule("aten::normal_", [](const OpCall& c) { return fill(c, Dist::Normal); });
    dtensor::register_rule("aten::bernoulli_.float",
                           [](const OpCall& c) { return fill(c, Dist::Bernoulli); });
    dtensor::register_rule("aten::random_.from",
                           [](const OpCall& c) { return fill(c, Dist::RandInt); });
    dtensor::register_rule("aten::native_dropout", native_dropout);
  }
};
const Registrar registrar;

}  // namespace

}  // namespace vescale::random
