// Internal: the TensorImpl behind a DTensor, on the PrivateUse1 dispatch key (docs/dtensor.md).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <memory>

#include "vescale/dtensor/dtensor_spec.h"

namespace vescale::dtensor {

class DTensorImpl : public c10::TensorImpl {
 public:
  DTensorImpl(at::Tensor local, std::shared_ptr<const DTensorSpec> spec);

  const at::Tensor& local() const { return local_; }
  const DTensorSpec& spec() const { return *spec_; }
  const std::shared_ptr<const DTensorSpec>& spec_ptr() const { return spec_; }
  // In-place ops that resize or re-point the local shard (set_, resize_) update both.
  void reset(at::Tensor local, std::shared_ptr<const DTensorSpec> spec);

  // Autograd and detach copy TensorImpls through these; the copy must stay a DTensor.
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(const c10::VariableVersion& version_counter,
                                                              bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(c10::VariableVersion&& version_counter,
                                                              bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  const char* tensorimpl_type_name() const override { return "DTensorImpl"; }
  void refresh_metadata();

  at::Tensor local_;
  std::shared_ptr<const DTensorSpec> spec_;
};

// Ensures the PrivateUse1 backend ("dtensor"), its device guard, hooks and the fallback
// kernels are registered. Idempotent and cheap after the first call.
void ensure_backend_registered();

// Wraps a local shard without any autograd link (inside the dispatcher, or for grads).
at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec);
at::Tensor make_dtensor(at::Tensor local, DTensorSpec spec);

// Unchecked accessors for code that already knows `t` is a DTensor.
DTensorImpl* dtensor_impl(const at::Tensor& t);

// The mesh used for factory calls with no DTensor input; throws if none was set.
const mesh::DeviceMesh& default_mesh();

}  // namespace vescale::dtensor
