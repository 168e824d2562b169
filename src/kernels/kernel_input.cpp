// The routing test the kernel ops share, and the SIMD level (vescale/kernels/simd_level.h).
#include <algorithm>
#include <atomic>

#include "kernels/cpu_simd.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::kernels {

bool kernel_input(const at::Tensor& t) {
  if (t.scalar_type() != at::kFloat) return false;
  if (dtensor::is_dtensor(t)) return dtensor::spec_of(t).mesh.device_type() == "cpu";
  return cpu_float(t);
}

namespace {
std::atomic<int> forced_level{-1};
}

SimdLevel detected_simd_level() {
#ifdef KERNELS_X86_SIMD
  static const SimdLevel l = __builtin_cpu_supports("avx512f") ? SimdLevel::avx512
                             : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                                 ? SimdLevel::avx2
                                 : SimdLevel::scalar;
  return l;
#else
  return SimdLevel::scalar;
#endif
}

SimdLevel simd_level() {
  const int f = forced_level.load(std::memory_order_relaxed);
  return f < 0 ? detected_simd_level() : static_cast<SimdLevel>(f);
}

void force_simd_level(SimdLevel l) {
  forced_level = std::min(static_cast<int>(l), static_cast<int>(detected_simd_level()));
}

void reset_simd_level() { forced_level = -1; }

}  // namespace vescale::kernels
