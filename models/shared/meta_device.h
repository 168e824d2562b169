// Sizing models without memory. libtorch's C++ modules allocate their parameters with default
// tensor options (the CPU) and take no device argument; Python's `with torch.device("meta")`
// has no C++ counterpart. MetaDeviceScope provides one: inside it every factory call (empty,
// ones, the tensors torch::nn::Linear / Embedding allocate) returns a meta tensor, which has a
// shape and a dtype but no storage. So `vescale-train --dry-run` builds LLaMA-3-70B (282 GB in
// fp32) in a few MB and reads the real parameter names and shapes off the module.
//
//   models::Llama model{nullptr};
//   { models::MetaDeviceScope meta; model = models::Llama(models::llama3_70b()); }
//   models::count_parameters(*model);  // 70,553,706,496
//
// How: the scope adds the Meta dispatch key to the thread's included keys and excludes
// BackendSelect (which would otherwise pick the CPU from the default options). Meant for
// construction only: a few aten ops have no C++ meta kernel (where, repeat), so the models skip
// computing buffers that live on the meta device. Not thread-transferable; nest freely.
#pragma once
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>

namespace torch::nn {
class Module;
}

namespace vescale::models {

class MetaDeviceScope {
 public:
  MetaDeviceScope();
  MetaDeviceScope(const MetaDeviceScope&) = delete;
  MetaDeviceScope& operator=(const MetaDeviceScope&) = delete;

 private:
  c10::impl::IncludeDispatchKeyGuard include_meta_;
  c10::impl::ExcludeDispatchKeyGuard exclude_backend_select_;
};

// Total elements of a module's parameters (tied weights count once: they are one parameter).
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace vescale::models
