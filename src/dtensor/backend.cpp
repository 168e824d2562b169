// Registers the "dtensor" backend on the PrivateUse1 dispatch key (docs/dtensor.md):
// the device name, a device guard that does nothing (the real devices are the mesh's),
// PrivateUse1 hooks, and the fallback kernel for every aten op.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <mutex>

#include "dtensor/dispatch.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/propagation.h"

namespace vescale::dtensor {

namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

// DTensors live on "dtensor:0"; their shards live on the mesh's real devices. The autograd
// engine still asks this device for streams and events, so every answer is a harmless no-op.
struct DTensorGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device) const override { return {kType, 0}; }
  c10::Device getDevice() const override { return {kType, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  // Index 0, not -1: the engine indexes its per-device ready queues with it.
  c10::Stream getStream(c10::Device) const noexcept override { return stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return stream(); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return stream(); }
  static c10::Stream stream() { return c10::Stream(c10::Stream::DEFAULT, c10::Device(kType, 0)); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeEvent(void*) const override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

struct DTensorHooks final : at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, DTensorGuardImpl);

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&dtensor_fallback>());
}

namespace {
// detach runs on every gradient AccumulateGrad stores and wherever a model or the framework
// drops history: the same shard (detached) under the same spec and strides, without the
// boxed fallback's propagation and wrapping.
at::Tensor detach(const at::Tensor& self) {
  const DTensorMeta* m = dtensor_impl(self);
  return make_dtensor(m->local().detach(), m->spec_ptr(), self.strides());
}
}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("detach", TORCH_FN(detach)); }
// libtorch has no autograd fallback for the private-use keys; ops without a derivative formula
// then fail in backward with a clear message instead of silently dropping the gradient.
TORCH_LIBRARY_IMPL(_, AutogradPrivateUse1, m) {
  m.fallback(torch::autograd::basicAutogradNotImplementedFallback());
}

void ensure_backend_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::register_privateuse1_backend("dtensor");
    at::RegisterPrivateUse1HooksInterface(new DTensorHooks());
    // Ops with a CompositeExplicitAutograd(NonFunctional) kernel would run that kernel on the
    // wrapper itself (mm as empty + mm.out, transpose as as_strided). Give every such aten op
    // our fallback as an explicit PrivateUse1 kernel so that the functional op reaches the rules.
    static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__,
                              __LINE__);
    auto& d = c10::Dispatcher::singleton();
    for (auto key : {c10::DispatchKey::CompositeExplicitAutograd,
                     c10::DispatchKey::CompositeExplicitAutogradNonFunctional}) {
      for (const auto& name : d.getAllOpNamesForDispatchKey(key)) {
        if (name.name.rfind("aten::", 0) != 0) continue;
        auto h = d.findOp(name);
        if (!h || h->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
        std::string full =
            name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
        lib.impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&dtensor_fallback>());
      }
    }
    register_pointwise_rules();
    register_matmul_rules();
    register_reduction_rules();
    register_view_rules();
    register_tensor_rules();
    register_softmax_rules();
    register_embedding_rules();
    register_norm_rules();
    register_index_rules();
    register_foreach_rules();
    register_attention_rules();
  });
}

}  // namespace vescale::dtensor
