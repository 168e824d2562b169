// Internal: what the CPU kernels share. The SLEEF functions libtorch_cpu exports (the ones ATen's
// own CPU kernels call, so ours round the same way), the run-time SIMD level
// (vescale/kernels/simd_level.h), and which tensors the kernels take.
#pragma once

#include <ATen/core/Tensor.h>

#include "vescale/kernels/simd_level.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KERNELS_X86_SIMD 1
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx2,fma")
extern "C" __m256 Sleef_expf8_u10(__m256);
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
extern "C" __m512 Sleef_expf16_u10(__m512);
#pragma GCC pop_options
#endif

namespace vescale::kernels {

// What a kernel reads and writes directly: a plain CPU fp32 strided tensor.
inline bool cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

// What a kernel op takes: a CPU fp32 tensor, or a DTensor whose shards are (its rules hand the
// kernel plain shards).
bool kernel_input(const at::Tensor& t);

}  // namespace vescale::kernels
