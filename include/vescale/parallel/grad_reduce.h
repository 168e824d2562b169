// Gradient reduction, simplest form: after backward, a parameter's gradient may carry
// placements its parameter doesn't have (Partial over the data-parallel dims, or over tp for
// replicated weights fed sequence-sharded activations). Each such gradient is redistributed to
// its parameter's placements: an all-reduce or reduce-scatter per parameter. Bucketing and
// overlap with backward build on this (docs/parallel.md).
#pragma once
#include <cstdint>

namespace torch::nn {
class Module;
}

namespace vescale::parallel {

// Returns how many gradients needed a collective. Plain (non-DTensor) gradients are left alone.
int64_t reduce_gradients(torch::nn::Module& model);

}  // namespace vescale::parallel
