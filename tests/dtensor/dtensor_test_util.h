// Helpers for the multi-rank DTensor tests: deterministic full tensors (identical on every
// rank) on the world's device, and every placement of a tensor on a mesh.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"

namespace vescale::testing {

// Where the tests' tensors live: the world's device (cpu, or cuda when the test binary runs
// with VESCALE_TEST_DEVICE=cuda; tests/dist_main.cpp); cpu before dist::init.
at::Device device();

// Values from a seeded CPU generator, on device(): the same on every rank and every device.
at::Tensor full_randn(std::vector<int64_t> shape, uint64_t seed);

// Every combination of Replicate / Shard(d) (for each tensor dim) / optionally Partial, one per
// mesh dim.
std::vector<dtensor::Placements> all_placements(const mesh::DeviceMesh& mesh, int64_t tensor_ndim,
                                                bool partial);

// A DTensor holding `full` with `placements`; Partial placements split the value into
// rank-dependent terms that sum to it, so reductions are really exercised.
at::Tensor make_input(const at::Tensor& full, const mesh::DeviceMesh& mesh,
                      const dtensor::Placements& placements);

std::string describe(const std::vector<dtensor::Placements>& ps);

}  // namespace vescale::testing
