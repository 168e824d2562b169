// The CPU kernel. Each row segment of the local region is a run of consecutive global indices;
// it is filled 64 elements (16 Philox blocks) at a time: Philox runs across the 16 blocks with
// one array per word, then the distribution across the 64 elements, loops that the compiler
// vectorises (SSE2, or AVX2 where the CPU has it). The math is philox.h's, operation for
// operation, so the bits equal the per-element formula (and the CUDA kernel's).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>

#include "random/kernels.h"
#include "vescale/common/check.h"

// The batch functions inline all of philox.h (flatten), so their loops vectorise; on x86-64
// they come in an AVX2 copy beside the baseline one, picked at load time (AVX2 does not
// enable FMA, and this file is built with -ffp-contract=off anyway).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VESCALE_SIMD_BATCH __attribute__((flatten, target_clones("avx2", "default")))
#elif defined(__GNUC__)
#define VESCALE_SIMD_BATCH __attribute__((flatten))
#else
#define VESCALE_SIMD_BATCH
#endif

namespace vescale::random {

namespace {

constexpr int kBlocks = 16;          // Philox blocks per batch
constexpr int kBatch = 4 * kBlocks;  // elements per batch

// Philox for blocks first .. first + kBlocks - 1; w[lane][j] is word `lane` of block first + j.
VESCALE_SIMD_BATCH void philox_batch(uint64_t seed, uint64_t first, uint32_t (&w)[4][kBlocks]) {
  uint32_t c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  for (int j = 0; j < kBlocks; ++j) {
    const uint64_t block = first + static_cast<uint64_t>(j);
    c0[j] = static_cast<uint32_t>(block);
    c1[j] = static_cast<uint32_t>(block >> 32);
    c2[j] = 0;
    c3[j] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int j = 0; j < kBlocks; ++j) philox_round(c0[j], c1[j], c2[j], c3[j], k0, k1);
  }
  for (int j = 0; j < kBlocks; ++j) {
    w[0][j] = c0[j];
    w[1][j] = c1[j];
    w[2][j] = c2[j];
    w[3][j] = c3[j];
  }
}

// The values of a batch's elements, in element order (v[4 j + lane]).
VESCALE_SIMD_BATCH void batch_values(const uint32_t (&w)[4][kBlocks], const DistParams& params,
                                     double (&v)[kBatch]) {
  const DistParams p = params;  // a local copy: stores to v cannot alias it
  double x[4][kBlocks];
  switch (p.dist) {
    case Dist::Uniform:
      for (int l = 0; l < 4; ++l)
        for (int j = 0; j < kBlocks; ++j) x[l][j] = uniform_value(w[l][j], p);
      break;
    case Dist::Bernoulli:
      for (int l = 0; l < 4; ++l)
        for (int j = 0; j < kBlocks; ++j) x[l][j] = bernoulli_value(w[l][j], p);
      break;
    case Dist::Normal:
      for (int j = 0; j < kBlocks; ++j) normal_pair(w[0][j], w[1][j], p, x[0][j], x[1][j]);
      for (int j = 0; j < kBlocks; ++j) normal_pair(w[2][j], w[3][j], p, x[2][j], x[3][j]);
      break;
    case Dist::RandInt:
      for (int l = 0; l < 4; ++l)
        for (int j = 0; j < kBlocks; ++j) x[l][j] = randint_value(w[l][j], p);
      break;
    case Dist::TruncNormal:
      for (int l = 0; l < 4; ++l)
        for (int j = 0; j < kBlocks; ++j) x[l][j] = trunc_normal_value(w[l][j], p);
      break;
  }
  for (int j = 0; j < kBlocks; ++j)
    for (int l = 0; l < 4; ++l) v[4 * j + l] = x[l][j];
}

// Elements g .. g + n - 1 of the stream (one run of consecutive global indices) into out.
template <typename T>
void fill_run(T* out, uint64_t g, int64_t n, uint64_t seed, uint64_t base, const DistParams& p) {
  // Whole batches; the first may start mid-block (its leading elements are dropped).
  while (n > 0 && static_cast<int64_t>(g % 4) + n >= kBatch) {
    uint32_t w[4][kBlocks];
    double v[kBatch];
    philox_batch(seed, base + g / 4, w);
    batch_values(w, p, v);
    const int skip = static_cast<int>(g % 4), m = kBatch - skip;
    for (int k = 0; k < m; ++k) out[k] = static_cast<T>(v[skip + k]);
    out += m;
    g += static_cast<uint64_t>(m);
    n -= m;
  }
  // The rest (under a batch), one block at a time: each block's 4 values once.
  while (n > 0) {
    const Philox4 r = philox_block(seed, base + g / 4);
    double v[4];
    if (p.dist == Dist::Normal) {
      normal_pair(r.v[0], r.v[1], p, v[0], v[1]);
      normal_pair(r.v[2], r.v[3], p, v[2], v[3]);
    } else {
      for (uint32_t l = 0; l < 4; ++l) v[l] = value_from_block(r, l, p);
    }
    for (uint32_t l = static_cast<uint32_t>(g % 4); l < 4 && n > 0; ++l, ++g, --n)
      *out++ = static_cast<T>(v[l]);
  }
}

// Global linear index of the first element of local row `row` (all dims but the last).
struct RegionIndex {
  std::vector<int64_t> local, offset, gstride;
  int64_t row_start(int64_t row) const {
    const int64_t nd = static_cast<int64_t>(local.size());
    int64_t g = nd ? offset[nd - 1] * gstride[nd - 1] : 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      const int64_t j = row % local[d];
      row /= local[d];
      g += (offset[d] + j) * gstride[d];
    }
    return g;
  }
};

// Flat chunks of the local region in parallel; a chunk is cut into row segments, each a run
// of consecutive global indices.
template <typename T>
void fill_typed(T* out, const RegionIndex& ri, int64_t numel, int64_t cols, uint64_t seed,
                uint64_t base, const DistParams& p) {
  at::parallel_for(0, numel, 16384, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1;) {
      const int64_t row = i / cols, col = i % cols, n = std::min(cols - col, i1 - i);
      fill_run(out + i, static_cast<uint64_t>(ri.row_start(row) + col), n, seed, base, p);
      i += n;
    }
  });
}

}  // namespace

void fill_region_cpu(at::Tensor& out, const std::vector<int64_t>& global_shape,
                     const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                     const DistParams& p) {
  VESCALE_CHECK(out.is_contiguous(), "random: the output must be contiguous");
  RegionIndex ri{out.sizes().vec(), offset, std::vector<int64_t>(global_shape.size(), 1)};
  for (int64_t d = static_cast<int64_t>(global_shape.size()) - 2; d >= 0; --d)
    ri.gstride[d] = ri.gstride[d + 1] * global_shape[d + 1];
  const int64_t cols = out.dim() ? out.size(-1) : 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.scalar_type() == at::kFloat)
    return fill_typed(out.data_ptr<float>(), ri, n, cols, seed, base, p);
  if (out.scalar_type() == at::kDouble)
    return fill_typed(out.data_ptr<double>(), ri, n, cols, seed, base, p);
  // Other dtypes (bf16, half, ints, bool): draw in double, then cast.
  at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(at::kDouble));
  fill_typed(tmp.data_ptr<double>(), ri, n, cols, seed, base, p);
  out.copy_(tmp);
}

}  // namespace vescale::random
