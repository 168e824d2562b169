// libtorch's default CPU generator (plain-tensor dropout, libtorch's inits), saved and put
// back: by activation checkpointing's replay, and around work that must not advance it (the
// trainer's sampler, built on rank 0 alone). Process-wide, as the generator is.
#pragma once
#include <ATen/core/Tensor.h>

namespace vescale::random {

at::Tensor cpu_generator_state();
void set_cpu_generator_state(const at::Tensor& state);

}  // namespace vescale::random
