// Internal: the one boxed kernel every aten op on a DTensor reaches.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace vescale::dtensor {

void dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// accumulate.cpp's add_ summed two DTensors shard by shard (DispatchStats::in_place_sums).
void count_in_place_sum();

}  // namespace vescale::dtensor
