// Counter-based Philox4x32-10 and the transforms from its output to distributions, shared
// by the CPU and CUDA kernels (one header, so both produce the same bits; docs/random.md).
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

// Philox4x32-10's constants (Salmon et al., SC'11; Random123's key schedule).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u, kPhiloxW0 = 0x9E3779B9u,
                   kPhiloxW1 = 0xBB67AE85u;

// One round on counter words (c0, c1, c2, c3) under round key (k0, k1). The CPU kernel runs
// it across many blocks at once (one array per word), so it is a function of words.
VESCALE_HD void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0,
                             uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  mulhilo32(kPhiloxM0, c0, hi0, lo0);
  mulhilo32(kPhiloxM1, c2, hi1, lo1);
  c0 = hi1 ^ c1 ^ k0;
  c1 = lo1;
  c2 = hi0 ^ c3 ^ k1;
  c3 = lo0;
}

// Philox4x32 with 10 rounds; the key advances by (W0, W1) before every round but the first.
VESCALE_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    philox_round(ctr.v[0], ctr.v[1], ctr.v[2], ctr.v[3], k0, k1);
  }
  return ctr;
}

// The 4 words for 128-bit block number `block` under `seed`.
VESCALE_HD Philox4 philox_block(uint64_t seed, uint64_t block) {
  Philox4 ctr{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// ---- deterministic elementary functions (double) --------------------------------------
// Horner forms with literal coefficients: a fixed sequence of IEEE operations.

// Natural log of x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
// s = (m-1)/(m+1), |s| <= 0.1716; the series to s^27 is exact to double precision.
// Integer bit work and no branches, so that the CPU kernel vectorises it; every step is exact.
VESCALE_HD double det_log(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint64_t mant = bits & 0x000fffffffffffffull;
  const uint64_t halve =
      mant > 0x0006a09e667f3bcdull ? 1u : 0u;  // 1.mant > sqrt(2): use m / 2, e + 1
  const uint64_t e_bits =
      (((bits >> 52) & 0x7ff) + halve) | 0x4330000000000000ull;  // the double 2^52 + biased e
  const uint64_t m_bits = mant | (0x3ff0000000000000ull - (halve << 52));
  double e, m;
  memcpy(&e, &e_bits, sizeof e);
  memcpy(&m, &m_bits, sizeof m);
  e = e - 4503599627370496.0 - 1023.0;
  const double s = (m - 1.0) / (m + 1.0), z = s * s;
  double h = 0.037037037037037035;
  h = h * z + 0.04;
  h = h * z + 0.043478260869565216;
  h = h * z + 0.047619047619047616;
  h = h * z + 0.05263157894736842;
  h = h * z + 0.058823529411764705;
  h = h * z + 0.06666666666666667;
  h = h * z + 0.07692307692307693;
  h = h * z + 0.09090909090909091;
  h = h * z + 0.1111111111111111;
  h = h * z + 0.14285714285714285;
  h = h * z + 0.2;
  h = h * z + 0.3333333333333333;
  h = h * z + 1.0;
  return e * 0.6931471805599453 + 2.0 * s * h;
}

// sin and cos of 2*pi*t for t in [0, 1): quarter-turn reduction (exact), then Taylor series
// on [0, pi/2) to degree 23 (error below 1e-20).
VESCALE_HD void det_sincos_turns(double t, double& s, double& c) {
  const double q = t * 4.0;
  const int k = static_cast<int>(q);
  const double y = (q - k) * 1.5707963267948966;
  const double z = y * y;
  double hs = -3.868170170630684e-23;
  hs = hs * z + 1.9572941063391263e-20;
  hs = hs * z + -8.22063524662433e-18;
  hs = hs * z + 2.8114572543455206e-15;
  hs = hs * z + -7.647163731819816e-13;
  hs = hs * z + 1.6059043836821613e-10;
  hs = hs * z + -2.505210838544172e-08;
  hs = hs * z + 2.7557319223985893e-06;
  hs = hs * z + -0.0001984126984126984;
  hs = hs * z + 0.008333333333333333;
  hs = hs * z + -0.16666666666666666;
  hs = hs * z + 1.0;
  double hc = -8.896791392450574e-22;
  hc = hc * z + 4.110317623312165e-19;
  hc = hc * z + -1.5619206968586225e-16;
  hc = hc * z + 4.779477332387385e-14;
  hc = hc * z + -1.1470745597729725e-11;
  hc = hc * z + 2.08767569878681e-09;
  hc = hc * z + -2.755731922398589e-07;
  hc = hc * z + 2.48015873015873e-05;
  hc = hc * z + -0.001388888888888889;
  hc = hc * z + 0.041666666666666664;
  hc = hc * z + -0.5;
  hc = hc * z + 1.0;
  const double sn = y * hs, cs = hc;
  // Quadrant k: (s, c) = (sn, cs), (cs, -sn), (-sn, -cs), (-cs, sn); selects, not a switch.
  const double a = (k & 1) ? cs : sn, b = (k & 1) ? sn : cs;
  s = (k & 2) ? -a : a;
  c = ((k + 1) & 2) ? -b : b;
}

// ---- element values -----------------------------------------------------------------

enum class Dist : int { Uniform = 0, Normal = 1, Bernoulli = 2, RandInt = 3, TruncNormal = 4 };

struct DistParams {
  Dist dist = Dist::Uniform;
  double a = 0.0, b = 1.0;  // uniform [a, b); normal mean a, std b; bernoulli p = a; randint [a, b)
  // trunc normal: mean a, std b, CDF bounds [c, d) of the standardized limits, values clamped to
  // [e, f]
  double c = 0.0, d = 1.0, e = 0.0, f = 0.0;
};

// Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9).
VESCALE_HD double normal_icdf(double p) {
  const double lo = 0.02425, hi = 1.0 - lo;
  if (p < lo || p > hi) {
    const double q = sqrt(-2.0 * det_log(p < lo ? p : 1.0 - p));
    const double num =
        ((((-7.784894002430293e-03 * q + -3.223964580411365e-01) * q + -2.400758277161838e+00) * q +
          -2.549732539343734e+00) *
             q +
         4.374664141464968e+00) *
            q +
        2.938163982698783e+00;
    const double den =
        (((7.784695709041462e-03 * q + 3.224671290700398e-01) * q + 2.445134137142996e+00) * q +
         3.754408661907416e+00) *
            q +
        1.0;
    return p < lo ? num / den : -(num / den);
  }
  const double q = p - 0.5, r = q * q;
  const double num =
      (((((-3.969683028665376e+01 * r + 2.209460984245205e+02) * r + -2.759285104469687e+02) * r +
         1.383577518672690e+02) *
            r +
        -3.066479806614716e+01) *
           r +
       2.506628277459239e+00) *
      q;
  const double den =
      ((((-5.447609879822406e+01 * r + 1.615858368580409e+02) * r + -1.556989798598866e+02) * r +
        6.680131188771972e+01) *
           r +
       -1.328068155288572e+01) *
          r +
      1.0;
  return num / den;
}

// A 32-bit word as a double, exactly, through a signed conversion (which SIMD units have;
// unsigned 32-bit to double needs AVX-512).
VESCALE_HD double u32_to_double(uint32_t w) {
  return static_cast<double>(static_cast<int32_t>(w ^ 0x80000000u)) + 2147483648.0;
}

// The distributions, from one word (two for Box-Muller) of a Philox block.
VESCALE_HD double uniform_value(uint32_t w, const DistParams& p) {
  const double u = static_cast<double>(static_cast<int32_t>(w >> 8)) *
                   (1.0 / 16777216.0);  // 24 bits: exact in float
  return p.a + u * (p.b - p.a);
}

VESCALE_HD double bernoulli_value(uint32_t w, const DistParams& p) {
  return (u32_to_double(w) / 4294967296.0) < p.a ? 1.0 : 0.0;
}

VESCALE_HD double randint_value(uint32_t w, const DistParams& p) {
  const uint64_t range = static_cast<uint64_t>(p.b - p.a);
  return p.a + static_cast<double>((static_cast<uint64_t>(w) * range) >> 32);
}

VESCALE_HD double trunc_normal_value(
    uint32_t w, const DistParams& p) {  // inverse CDF of a uniform in [CDF(lo), CDF(hi))
  const double u = (u32_to_double(w) + 0.5) / 4294967296.0;  // (0, 1)
  const double x = p.a + p.b * normal_icdf(p.c + u * (p.d - p.c));
  return x < p.e ? p.e : (x > p.f ? p.f : x);
}

// Box-Muller on the words of lanes (even, even + 1) of a block: both normals of the pair.
VESCALE_HD void normal_pair(uint32_t w_even, uint32_t w_odd, const DistParams& p, double& z_even,
                            double& z_odd) {
  const double two32 = 4294967296.0;
  const double u1 = (u32_to_double(w_even) + 1.0) / two32;  // (0, 1]
  const double u2 = u32_to_double(w_odd) / two32;           // [0, 1)
  const double radius = sqrt(-2.0 * det_log(u1));
  double s, c;
  det_sincos_turns(u2, s, c);
  z_even = p.a + p.b * (radius * c);
  z_odd = p.a + p.b * (radius * s);
}

// The value of lane `lane` of a Philox block `r`, in double (the caller casts to its dtype).
VESCALE_HD double value_from_block(const Philox4& r, uint32_t lane, const DistParams& p) {
  switch (p.dist) {
    case Dist::Uniform:
      return uniform_value(r.v[lane], p);
    case Dist::Normal: {  // Box-Muller on lanes (0,1) and (2,3) of the block
      double z_even, z_odd;
      normal_pair(r.v[lane & ~1u], r.v[lane | 1u], p, z_even, z_odd);
      return (lane & 1u) ? z_odd : z_even;
    }
    case Dist::Bernoulli:
      return bernoulli_value(r.v[lane], p);
    case Dist::RandInt:
      return randint_value(r.v[lane], p);
    case Dist::TruncNormal:
      return trunc_normal_value(r.v[lane], p);
  }
  return 0.0;
}

// The value of global element `index` under (seed, offset).
VESCALE_HD double element_value(uint64_t seed, uint64_t offset, uint64_t index,
                                const DistParams& p) {
  return value_from_block(philox_block(seed, offset + index / 4), static_cast<uint32_t>(index % 4),
                          p);
}

}  // namespace vescale::random
