// The CPU kernel: rows of the local region in parallel; consecutive elements of a row share
// their Philox block, computed once per 4 elements.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "random/kernels.h"
#include "vescale/common/check.h"

namespace vescale::random {

namespace {

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

// Flat chunks of the local region in parallel (rows may be long or short); within a chunk
// the global index advances along the last dim, so each Philox block is computed once.
template <typename T>
void fill_typed(T* out, const RegionIndex& ri, int64_t numel, int64_t cols, uint64_t seed, uint64_t base,
                const DistParams& p) {
  at::parallel_for(0, numel, 16384, [&](int64_t i0, int64_t i1) {
    int64_t row = i0 / cols, col = i0 % cols;
    uint64_t g = static_cast<uint64_t>(ri.row_start(row)) + col;
    uint64_t block = ~uint64_t{0}, pair = ~uint64_t{0};
    Philox4 r{};
    double pair_vals[2] = {0, 0};
    for (int64_t i = i0; i < i1; ++i) {
      const uint64_t b = g / 4;
      if (b != block) {
        block = b;
        r = philox_block(seed, base + b);
      }
      const uint32_t lane = static_cast<uint32_t>(g % 4);
      if (p.dist == Dist::Normal) {
        // Box-Muller gives both lanes of a pair at once; the values are those of value_from_block.
        if (g / 2 != pair) {
          pair = g / 2;
          normal_pair(r, lane & ~1u, p, pair_vals[0], pair_vals[1]);
        }
        out[i] = static_cast<T>(pair_vals[lane & 1u]);
      } else {
        out[i] = static_cast<T>(value_from_block(r, lane, p));
      }
      if (++col == cols) {
        col = 0;
        g = static_cast<uint64_t>(ri.row_start(++row));
      } else {
        ++g;
      }
    }
  });
}

}  // namespace

void fill_region_cpu(at::Tensor& out, const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                     uint64_t seed, uint64_t base, const DistParams& p) {
  VESCALE_CHECK(out.is_contiguous(), "random: the output must be contiguous");
  RegionIndex ri{out.sizes().vec(), offset, std::vector<int64_t>(global_shape.size(), 1)};
  for (int64_t d = static_cast<int64_t>(global_shape.size()) - 2; d >= 0; --d)
    ri.gstride[d] = ri.gstride[d + 1] * global_shape[d + 1];
  const int64_t cols = out.dim() ? out.size(-1) : 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  if (out.scalar_type() == at::kFloat) return fill_typed(out.data_ptr<float>(), ri, n, cols, seed, base, p);
  if (out.scalar_type() == at::kDouble) return fill_typed(out.data_ptr<double>(), ri, n, cols, seed, base, p);
  // Other dtypes (bf16, half, ints, bool): draw in double, then cast.
  at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(at::kDouble));
  fill_typed(tmp.data_ptr<double>(), ri, n, cols, seed, base, p);
  out.copy_(tmp);
}

}  // namespace vescale::random
