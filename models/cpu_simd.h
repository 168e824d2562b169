// The vector width the CPU kernels in models/ run at, chosen at run time (the library is built
// for baseline x86-64), which tensors they take, and the SLEEF functions libtorch_cpu exports:
// the ones ATen's own CPU kernels call, so ours round the same way.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <atomic>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MODELS_X86_SIMD 1
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

namespace models {

// What the kernels in models/ read and write directly: a plain CPU fp32 strided tensor. DTensors
// are not (their device is the "dtensor" backend), nor CUDA or other dtypes; those go to ATen.
inline bool cpu_float(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
}

}  // namespace models

namespace models::simd {

enum class Level { scalar, avx2, avx512 };

// The widest level this CPU has (AVX2 also needs FMA), read once.
inline Level detected() {
#ifdef MODELS_X86_SIMD
  static const Level l = __builtin_cpu_supports("avx512f") ? Level::avx512
                         : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                             ? Level::avx2
                             : Level::scalar;
  return l;
#else
  return Level::scalar;
#endif
}

inline std::atomic<int> forced_level{-1};

// The level the kernels use: the CPU's, unless a test forced a lower one.
inline Level level() {
  const int f = forced_level.load(std::memory_order_relaxed);
  return f < 0 ? detected() : static_cast<Level>(f);
}

// For tests, so that every code path runs on one machine: never above what the CPU has.
inline void force_level(Level l) {
  forced_level = std::min(static_cast<int>(l), static_cast<int>(detected()));
}
inline void reset_level() { forced_level = -1; }

}  // namespace models::simd
