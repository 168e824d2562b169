// The vector width the CPU kernels run at, chosen at run time (the library is built for baseline
// x86-64). Tests lower it so that every code path runs on one machine.
#pragma once

namespace vescale::kernels {

enum class SimdLevel { scalar, avx2, avx512 };

SimdLevel detected_simd_level();  // the widest this CPU has (AVX2 also needs FMA), read once
SimdLevel simd_level();           // what the kernels use: the CPU's, unless forced lower

// Process-wide, for tests: never above what the CPU has. reset_simd_level() undoes it.
void force_simd_level(SimdLevel l);
void reset_simd_level();

}  // namespace vescale::kernels
