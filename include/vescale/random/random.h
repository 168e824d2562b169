// Consistent random numbers (docs/random.md): one counter-based stream, keyed by each element's
// global index, so a tensor filled sharded equals the same tensor filled on one device, bit
// for bit, whatever the sharding, the world size, or the device (CPU or CUDA).
//
// The functions take plain tensors or DTensors. On a DTensor each rank fills its shard with
// the values the single-device tensor has there; the aten random ops on DTensors
// (uniform_, normal_, bernoulli_, random_, native_dropout) use the same stream.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace vescale::random {

// The generator: a seed, and an offset (in 128-bit Philox blocks) that every random op
// advances by ceil(numel / 4) of its global shape, identically on every rank.
struct State {
  uint64_t seed = 0;
  uint64_t offset = 0;
};
// Process-wide: one generator for the process (every thread, every mesh).
void manual_seed(uint64_t seed);  // offset back to 0
State get_state();
void set_state(const State& s);

at::Tensor& uniform_(at::Tensor& t, double from = 0.0, double to = 1.0);
at::Tensor& normal_(at::Tensor& t, double mean = 0.0, double std = 1.0);
at::Tensor& bernoulli_(at::Tensor& t, double p);
at::Tensor& randint_(at::Tensor& t, int64_t low, int64_t high);  // [low, high)
// Normal(mean, std) truncated to [a, b], as torch.nn.init.trunc_normal_ (by inverse CDF).
at::Tensor& trunc_normal_(at::Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                          double b = 2.0);
// Zeroes each element with probability p and scales the rest by 1/(1-p). Differentiable.
at::Tensor dropout(const at::Tensor& x, double p, bool train = true);

// torch::nn::init equivalents on this stream. Fans come from the global shape.
at::Tensor& kaiming_uniform_(at::Tensor& w,
                             double a = 2.23606797749979);  // a = sqrt(5), as nn.Linear
at::Tensor& xavier_uniform_(at::Tensor& w, double gain = 1.0);

}  // namespace vescale::random
