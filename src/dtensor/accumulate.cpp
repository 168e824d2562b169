// In-place sums of DTensors: `add_` without the boxed fallback, and the autograd engine's
// gradient accumulation in place (docs/dtensor.md, "In-place gradient accumulation").
//
// The engine sums two gradients of one tensor with `old.add_(new)` when it holds the last
// reference to `old` and to its storage, else with `old + new` into fresh memory. A DTensor
// borrows its shard's storage (dtensor_impl.cpp), so for a DTensor that test says nobody else
// sees the shard, and the sum can land in it. Anything else (other placements, a plain
// tensor, a Partial(max)) takes the boxed fallback: add_ writes into self in self's placements.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "dtensor/dispatch.h"
#include "dtensor/dtensor_impl.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

// Summing shard by shard is the global sum: same mesh, placements, shape and dtype, and no
// Partial but a sum (a Partial(max) is not linear).
bool same_layout(const DTensorSpec& a, const DTensorSpec& b) {
  if (&a != &b && !(a == b)) return false;
  for (const auto& p : a.placements)
    if (p.is_partial() && p.reduce != dist::ReduceOp::Sum) return false;
  return true;
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (is_dtensor(self) && is_dtensor(other)) {
    const DTensorMeta* a = dtensor_impl(self);
    const DTensorMeta* b = dtensor_impl(other);
    if (same_layout(a->spec(), b->spec()) &&
        at::has_internal_overlap(a->local()) != at::MemOverlap::Yes) {
      at::AutoDispatchBelowADInplaceOrView guard;
      a->local().add_(b->local(), alpha);
      count_in_place_sum();
      return self;
    }
  }
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::add_", "Tensor");
  torch::jit::Stack stack{self, other, alpha};
  dtensor_fallback(op, &stack);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("add_.Tensor", TORCH_FN(add_)); }

}  // namespace vescale::dtensor
