#include "dtensor/dtensor_impl.h"

#include <c10/core/DispatchKeySet.h>

#include <mutex>
#include <typeinfo>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {
const c10::Device kDTensorDevice(c10::DeviceType::PrivateUse1, 0);

// A subclass only for construction and for the borrowed storage below: everything else is plain
// TensorImpl behaviour (copies keep the BackendMeta).
//
// The wrapper borrows its shard's storage (+0, no reference of its own): `storage().use_count()`
// then counts who else holds the shard's memory (views, to_local results, other wrappers' shards).
// libtorch's autograd engine adds a second gradient in place only into a tensor whose handle and
// storage it holds alone; with the borrowed storage that test reads "nobody else sees this shard",
// and the sum lands in the shard (accumulate.cpp) instead of a fresh buffer (docs/dtensor.md,
// "In-place gradient accumulation"). The borrow is dropped before TensorImpl's own teardown,
// which would otherwise release a reference the wrapper never took.
class DTensorImplInit : public c10::TensorImpl {
 public:
  DTensorImplInit(const at::Tensor& local, const DTensorSpec& spec)
      : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), local.dtype(),
                        kDTensorDevice) {
    borrow(local);
    // Global sizes with contiguous strides: autograd (AccumulateGrad, validate_outputs) reads them.
    sizes_and_strides_.set_sizes(spec.shape);
    sizes_and_strides_.set_strides(c10::contiguous_strides(spec.shape));
    refresh_numel();
    refresh_contiguous();
  }
  ~DTensorImplInit() override { unborrow(); }
  void release_resources() override {
    unborrow();
    c10::TensorImpl::release_resources();
  }
  // A new shard (an in-place op that changed placements): borrow its storage instead. An
  // overlapping shard (an expanded view) lends none: the engine must not add into it.
  void borrow(const at::Tensor& local) {
    unborrow();
    if (local.has_storage() && local.is_non_overlapping_and_dense())
      storage_ = c10::Storage(
          c10::intrusive_ptr<c10::StorageImpl>::reclaim(local.storage().unsafeGetStorageImpl()));
    // Without one, reaching for the storage is a bug in a rule, as for any storage-less impl.
    storage_access_should_throw_ = !storage_;
  }

 private:
  void unborrow() {
    if (storage_) storage_.unsafeReleaseStorageImpl();
  }
  const char* tensorimpl_type_name() const override { return "DTensorImpl"; }
};

// One shard handle per wrapper: two wrappers over one handle would each see a storage count of
// 1 and could take in-place gradient sums meant for the other. A handle someone else still holds
// (an op that returned its input, an alias) gets a shallow copy, which the storage counts.
at::Tensor sole_handle(at::Tensor local) {
  if (local.use_count() > 1) return local.variable_data();
  return local;
}

// Drops the storage of any TensorImpl (a parameter that became a DTensor is a plain one) and
// makes reaching for it throw, as it did before the DTensor state arrived.
struct StorageOf : c10::TensorImpl {
  static void drop(c10::TensorImpl* t) {
    t->*(&StorageOf::storage_) = c10::Storage();
    (t->*(&StorageOf::set_storage_access_should_throw))();
  }
};
}  // namespace

void reset_dtensor(const at::Tensor& t, at::Tensor local, std::shared_ptr<const DTensorSpec> spec) {
  DTensorMeta* m = dtensor_impl(t);
  VESCALE_CHECK(spec->shape == m->spec_->shape && local.dtype() == m->local_.dtype(),
                "DTensor: an in-place op may change placements, not the global shape or dtype");
  local = sole_handle(std::move(local));
  if (auto* own = dynamic_cast<DTensorImplInit*>(t.unsafeGetTensorImpl())) own->borrow(local);
  m->local_ = std::move(local);
  m->spec_ = std::move(spec);
}

c10::intrusive_ptr<c10::BackendMeta> DTensorMeta::clone(
    const c10::intrusive_ptr<c10::BackendMeta>&) const {
  return c10::make_intrusive<DTensorMeta>(local_, spec_);
}

at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec) {
  ensure_backend_registered();
  VESCALE_CHECK(!is_dtensor(local), "DTensor: the local shard is itself a DTensor");
  local = sole_handle(std::move(local));
  at::Tensor t = at::detail::make_tensor<DTensorImplInit>(local, *spec);
  t.unsafeGetTensorImpl()->set_backend_meta(
      c10::make_intrusive<DTensorMeta>(std::move(local), std::move(spec)));
  return t;
}

at::Tensor make_dtensor(at::Tensor local, std::shared_ptr<const DTensorSpec> spec,
                        c10::IntArrayRef strides) {
  at::Tensor t = make_dtensor(std::move(local), std::move(spec));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), strides);
  return t;
}

at::Tensor make_dtensor(at::Tensor local, DTensorSpec spec) {
  return make_dtensor(std::move(local), std::make_shared<const DTensorSpec>(std::move(spec)));
}

DTensorMeta* dtensor_impl(const at::Tensor& t) {
  return static_cast<DTensorMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
}

bool is_dtensor(const at::Tensor& t) {
  if (!t.defined() || !t.key_set().has(c10::DispatchKey::PrivateUse1)) return false;
  // An exact type test, cheaper than a dynamic_cast on every input of every op (nothing
  // derives from DTensorMeta). The type_info objects are compared by address first: every
  // DTensorMeta is made in this library, and libstdc++'s `==` may compare the names.
  const c10::BackendMeta* meta = t.unsafeGetTensorImpl()->get_backend_meta();
  if (meta == nullptr) return false;
  const std::type_info& type = typeid(*meta);
  return &type == &typeid(DTensorMeta) || type == typeid(DTensorMeta);
}

void become_dtensor(const at::Tensor& t, const at::Tensor& dtensor) {
  VESCALE_CHECK(t.defined() && !is_dtensor(t), "become_dtensor: expected a plain tensor");
  VESCALE_CHECK(is_dtensor(dtensor), "become_dtensor: the source is not a DTensor");
  VESCALE_CHECK(!t.grad().defined(),
                "become_dtensor: the tensor already has a gradient; convert parameters "
                "before the first backward");
  VESCALE_CHECK(t.dtype() == dtensor.dtype() && t.sizes().equals(dtensor.sizes()),
                "become_dtensor: shape or dtype differ (", t.sizes(), " ", t.dtype(), " vs ",
                dtensor.sizes(), " ", dtensor.dtype(), ")");
  // What Tensor::set_data does, minus its check that both are dense CPU/CUDA tensors: the
  // impl takes the DTensor's keys, sizes, device and meta; every handle to it sees a DTensor.
  t.unsafeGetTensorImpl()->shallow_copy_from(dtensor.getIntrusivePtr());
  // The copy took a real reference to the shard's storage; a parameter keeps none (it is never
  // an in-flight gradient, and reset_dtensor could not move it to a new shard).
  StorageOf::drop(t.unsafeGetTensorImpl());
}

void become_local(const at::Tensor& t) {
  VESCALE_CHECK(is_dtensor(t), "become_local: expected a DTensor");
  VESCALE_CHECK(!t.grad().defined(),
                "become_local: the tensor already has a gradient; convert parameters "
                "before the first backward");
  const at::Tensor local = dtensor_impl(t)->local();
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  VESCALE_CHECK(!dynamic_cast<DTensorImplInit*>(impl),
                "become_local: only a tensor made a DTensor by become_dtensor "
                "can become local again");
  // Keys, sizes, strides, device and storage of the shard; the DTensor state goes with the
  // backend meta, which a plain source has none of to copy over.
  impl->shallow_copy_from(local.getIntrusivePtr());
  impl->set_backend_meta(c10::intrusive_ptr<c10::BackendMeta>());
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
  VESCALE_CHECK(g_default_mesh.has_value(),
                "DTensor: a factory op named the dtensor device but no mesh is known; "
                "create a DTensor first or call dtensor::set_default_mesh");
  return *g_default_mesh;
}

}  // namespace vescale::dtensor
