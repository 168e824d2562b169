// Counter-based Philox4x32-10 and the transforms from its output to distributions, shared
// by the CPU and CUDA kernels (one header, so both produce the same bits; DESIGN §5).
//
// Element i of a tensor of global shape S (its row-major index in S) under (seed, offset):
//   block = philox(counter = offset + i / 4, key = seed);  lane = i % 4
// Normals pair lanes (0,1) and (2,3) in Box-Muller, so each element depends only on i.
// The math below uses only +, -, *, / and sqrt in double, in a fixed order: IEEE makes those
// identical on CPU and GPU as long as nothing fuses multiply-adds (the files that include this
// are built with -ffp-contract=off / --fmad=false). log, sin and cos are therefore our own.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define VESCALE_HD __host__ __device__ __forceinline__
#else
#define VESCALE_HD inline
#endif

namespace vescale::random {

struct Philox4 {
  uint32_t v[4];
};

VESCALE_HD void mulhilo32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds (Salmon et al., SC'11; Random123's key schedule).
VESCALE_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(M0, ctr.v[0], hi0, lo0);
    mulhilo32(M1, ctr.v[2], hi1, lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The 4 words for 128-bit block number `block` under `seed`.
VESCALE_HD Philox4 philox_block(uint64_t seed, uint64_t block) {
  Philox4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// ---- deterministic elementary functions (double) --------------------------------------

// Natural log of x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh((m-1)/(m+1)).
VESCALE_HD double det_log(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  int64_t e = static_cast<int64_t>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double term = s, sum = 0.0;
  for (int k = 1; k <= 27; k += 2) {
    sum = sum + term / k;
    term = term * s2;
  }
  return static_cast<double>(e) * 0.6931471805599453 + 2.0 * sum;
}

// sin and cos of 2*pi*t for t in [0, 1): quarter-turn reduction (exact), then Taylor series.
VESCALE_HD void det_sincos_turns(double t, double& s, double& c) {
  const double q = t * 4.0;
  const int k = static_cast<int>(q);
  const double y = (q - k) * 1.5707963267948966;  // in [0, pi/2)
  const double y2 = y * y;
  double sn = 0.0, cs = 0.0, ts = y, tc = 1.0;
  for (int n = 0; n < 12; ++n) {
    sn = sn + ts;
    cs = cs + tc;
    ts = -ts * y2 / ((2 * n + 2) * (2 * n + 3));
    tc = -tc * y2 / ((2 * n + 1) * (2 * n + 2));
  }
  switch (k & 3) {
    case 0: s = sn; c = cs; break;
    case 1: s = cs; c = -sn; break;
    case 2: s = -sn; c = -cs; break;
    default: s = -cs; c = sn; break;
  }
}

// ---- element values -----------------------------------------------------------------

enum class Dist : int { Uniform = 0, Normal = 1, Bernoulli = 2, RandInt = 3 };

struct DistParams {
  Dist dist = Dist::Uniform;
  double a = 0.0, b = 1.0;  // uniform [a, b); normal mean a, std b; bernoulli p = a; randint [a, b)
};

// The value of global element `index`, in double (cast to the tensor's dtype by the caller).
VESCALE_HD double element_value(uint64_t seed, uint64_t offset, uint64_t index, const DistParams& p) {
  const Philox4 r = philox_block(seed, offset + index / 4);
  const uint32_t lane = static_cast<uint32_t>(index % 4);
  const double two32 = 4294967296.0;
  switch (p.dist) {
    case Dist::Uniform: {
      const double u = static_cast<double>(r.v[lane] >> 8) * (1.0 / 16777216.0);  // 24 bits: exact in float
      return p.a + u * (p.b - p.a);
    }
    case Dist::Normal: {
      const uint32_t even = lane & ~1u;
      const double u1 = (static_cast<double>(r.v[even]) + 1.0) / two32;  // (0, 1]
      const double u2 = static_cast<double>(r.v[even + 1]) / two32;       // [0, 1)
      const double radius = sqrt(-2.0 * det_log(u1));
      double s, c;
      det_sincos_turns(u2, s, c);
      return p.a + p.b * radius * ((lane & 1u) ? s : c);
    }
    case Dist::Bernoulli:
      return (static_cast<double>(r.v[lane]) / two32) < p.a ? 1.0 : 0.0;
    case Dist::RandInt: {
      const uint64_t range = static_cast<uint64_t>(p.b - p.a);
      return p.a + static_cast<double>((static_cast<uint64_t>(r.v[lane]) * range) >> 32);
    }
  }
  return 0.0;
}

}  // namespace vescale::random
