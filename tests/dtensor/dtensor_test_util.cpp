#include "dtensor/dtensor_test_util.h"

#include "vescale/dist/world.h"

namespace vescale::testing {

using namespace dtensor;

at::Device device() {
  return dist::is_initialized() ? at::Device(dist::device_string()) : at::Device(at::kCPU);
}

at::Tensor full_randn(std::vector<int64_t> shape, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(shape, gen, at::kFloat).to(device());
}

std::vector<Placements> all_placements(const mesh::DeviceMesh& mesh, int64_t tensor_ndim,
                                       bool partial) {
  std::vector<Placement> choices{Replicate()};
  for (int64_t d = 0; d < tensor_ndim; ++d) choices.push_back(Shard(d));
  if (partial) choices.push_back(Partial());
  std::vector<Placements> out{{}};
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    std::vector<Placements> next;
    for (auto& prefix : out)
      for (auto& c : choices) {
        auto p = prefix;
        p.push_back(c);
        next.push_back(p);
      }
    out = next;
  }
  return out;
}

at::Tensor make_input(const at::Tensor& full, const mesh::DeviceMesh& mesh,
                      const Placements& placements) {
  // Partial: rank r of each Partial group holds full * w_r, with weights summing to one.
  Placements as_replicate = placements;
  at::Tensor value = full.clone();
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    if (!placements[m].is_partial()) continue;
    as_replicate[m] = Replicate();
    const int64_t k = mesh.shape().sizes()[m], c = mesh.coordinate()[m];
    const double w = (c + 1.0) * 2.0 / (k * (k + 1.0));
    value = value * w;
  }
  auto dt = distribute_tensor(value, mesh, as_replicate);
  // Relabel the replicated-but-weighted values as Partial without moving data.
  auto local = to_local(dt);
  return from_local(local, mesh, placements, full.sizes().vec());
}

std::string describe(const std::vector<Placements>& ps) {
  std::string s;
  for (auto& p : ps) s += (s.empty() ? "" : " ") + to_string(p);
  return s;
}

}  // namespace vescale::testing
