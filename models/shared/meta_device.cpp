#include "vescale/models/shared/meta_device.h"

#include <torch/nn/module.h>

namespace vescale::models {

MetaDeviceScope::MetaDeviceScope()
    : include_meta_(c10::DispatchKey::Meta),
      exclude_backend_select_(c10::DispatchKey::BackendSelect) {}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace vescale::models
