// What the cuda tests share: whether a GPU is visible, and bitwise tensor equality.
#pragma once
#include <ATen/ATen.h>

#include <cstring>

#include "vescale/dist/cuda_device.h"

namespace vescale::testing {

inline bool gpu_visible() { return dist::cuda_device_count() > 0; }

// Same shape, dtype and bytes; either tensor may be on the GPU.
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

}  // namespace vescale::testing

// The GPU half of a case starts here: without a GPU the case ends (the main reports the skip).
#define VESCALE_GPU_HALF()                        \
  do {                                            \
    if (!vescale::testing::gpu_visible()) return; \
  } while (0)
