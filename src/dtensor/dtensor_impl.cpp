#include "dtensor/dtensor_impl.h"

#include <c10/core/DispatchKeySet.h>

#include <mutex>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {
const c10::Device kDTensorDevice(c10::DeviceType::PrivateUse1, 0);
}  // namespace

DTensorImpl::DTensorImpl(at::Tensor local, std::shared_ptr<const DTensorSpec> spec)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), local.dtype(), kDTensorDevice),
      local_(std::move(local)),
      spec_(std::move(spec)) {
  // The wrapper has no storage of its own: anything that reaches for it is a bug in a rule.
  set_storage_access_should_throw();
  refresh_metadata();
}

void DTensorImpl::refresh_metadata() {
  // Global sizes with contiguous strides: autograd (AccumulateGrad, validate_outputs) reads them.
  sizes_and_strides_.set_sizes(spec_->shape);
  sizes_and_strides_.set_strides(c10::contiguous_strides(spec_->shape));
  data_type_ = local_.dtype();
  refresh_numel();
  refresh_contiguous();
}

void DTensorImpl::reset(at::Tensor local, std::shared_ptr<const DTensorSpec> spec) {
  local_ = std::move(local);
  spec_ = std::move(spec);
  refresh_metadata();
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(const c10::VariableVersion& version_counter,
                                                                         bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(local_, spec_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->refresh_metadata();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> DTensorImpl::shallow_copy_and_detach(c10::VariableVersion&& version_counter,
                                                                         bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<DTensorImpl>(local_, spec_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  impl->refresh_metadata();
  return impl;
}

void DTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* src = dynamic_cast<DTensorImpl*>(impl.get());
  VESCALE_CHECK(src, "DTensor: cannot copy a plain tensor's metadata into a DTensor (.data = plain?); "
                     "use distribute_tensor or from_local");
  copy_tensor_metadata(src, this, version_counter(), allow_tensor_metadata_change());
  local_ = src->local_;
  spec_ = src->spec_;
  refresh_metadata();
}

at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec) {
  ensure_backend_registered();
  VESCALE_CHECK(!is_dtensor(local), "DTensor: the local shard is itself a DTensor");
  return at::detail::make_tensor<DTensorImpl>(std::move(local), std::move(spec));
}

at::Tensor make_dtensor(at::Tensor local, DTensorSpec spec) {
  return make_dtensor(std::move(local), std::make_shared<const DTensorSpec>(std::move(spec)));
}

DTensorImpl* dtensor_impl(const at::Tensor& t) { return static_cast<DTensorImpl*>(t.unsafeGetTensorImpl()); }

bool is_dtensor(const at::Tensor& t) {
  return t.defined() && t.key_set().has(c10::DispatchKey::PrivateUse1) &&
         dynamic_cast<DTensorImpl*>(t.unsafeGetTensorImpl()) != nullptr;
}

const DTensorSpec& spec_of(const at::Tensor& t) {
  VESCALE_CHECK(is_dtensor(t), "spec_of: not a DTensor (", t.defined() ? t.toString() : "undefined",
                "); make one with distribute_tensor or from_local");
  return dtensor_impl(t)->spec();
}

namespace {
std::mutex g_mesh_mutex;
std::optional<mesh::DeviceMesh> g_default_mesh;
}  // namespace

void set_default_mesh(const mesh::DeviceMesh& m) {
  std::lock_guard<std::mutex> lock(g_mesh_mutex);
  g_default_mesh = m;
}

const mesh::DeviceMesh& default_mesh() {
  std::lock_guard<std::mutex> lock(g_mesh_mutex);
  VESCALE_CHECK(g_default_mesh.has_value(), "DTensor: a factory op named the dtensor device but no mesh is known; "
                                            "create a DTensor first or call dtensor::set_default_mesh");
  return *g_default_mesh;
}

}  // namespace vescale::dtensor
