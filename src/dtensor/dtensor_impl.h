// Internal: how a DTensor is represented (docs/dtensor.md). The TensorImpl is an ordinary
// TensorImpl on the PrivateUse1 key with the global sizes that borrows its shard's storage (for
// the autograd engine's in-place test, dtensor_impl.cpp); the local shard and the
// spec ride in its BackendMeta (DTensorMeta), the slot libtorch gives private-use backends.
// Because the state lives there and not in a TensorImpl subclass, an existing tensor can
// *become* a DTensor in place (become_dtensor): that is how parallelize() turns a module's
// parameters into DTensors while the module's own members keep pointing at them.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <memory>

#include "vescale/dtensor/dtensor_spec.h"

namespace vescale::dtensor {

class DTensorMeta final : public c10::BackendMeta {
 public:
  DTensorMeta(at::Tensor local, std::shared_ptr<const DTensorSpec> spec)
      : local_(std::move(local)), spec_(std::move(spec)) {}

  const at::Tensor& local() const { return local_; }
  const DTensorSpec& spec() const { return *spec_; }
  const std::shared_ptr<const DTensorSpec>& spec_ptr() const { return spec_; }

  // detach() and autograd copy TensorImpls with their metadata; the copy gets its own meta
  // over the same local shard, as a detached plain tensor shares storage.
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& self) const override;

 private:
  friend void reset_dtensor(const at::Tensor&, at::Tensor, std::shared_ptr<const DTensorSpec>);
  at::Tensor local_;
  std::shared_ptr<const DTensorSpec> spec_;
};

// An in-place op that re-points a DTensor's shard (a placement change of self): the new shard
// and spec; the global shape and dtype stay.
void reset_dtensor(const at::Tensor& t, at::Tensor local, std::shared_ptr<const DTensorSpec> spec);

// Ensures the PrivateUse1 backend ("dtensor"), its device guard, hooks and the fallback
// kernels are registered. Idempotent and cheap after the first call.
void ensure_backend_registered();

// Wraps a local shard without any autograd link (inside the dispatcher, or for grads).
at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec);
at::Tensor make_dtensor(at::Tensor local, DTensorSpec spec);
// The same with global strides other than contiguous (a permuted view's: Strategy::dims_from).
at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec,
                        c10::IntArrayRef strides);

// Unchecked accessor for code that already knows `t` is a DTensor.
DTensorMeta* dtensor_impl(const at::Tensor& t);

// The mesh used for factory calls with no DTensor input; throws if none was set.
const mesh::DeviceMesh& default_mesh();

}  // namespace vescale::dtensor
