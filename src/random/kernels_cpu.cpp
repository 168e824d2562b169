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

template <typename T>
void fill_typed(T* out, const RegionIndex& ri, int64_t rows, int64_t cols, uint64_t seed, uint64_t base,
                const DistParams& p) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint64_t g0 = static_cast<uint64_t>(ri.row_start(r));
      T* row = out + r * cols;
      for (int64_t j = 0; j < cols; ++j) row[j] = static_cast<T>(element_value(seed, base, g0 + j, p));
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
  const int64_t rows = cols ? out.numel() / cols : 0;
  if (out.numel() == 0) return;
  if (out.scalar_type() == at::kFloat) return fill_typed(out.data_ptr<float>(), ri, rows, cols, seed, base, p);
  if (out.scalar_type() == at::kDouble) return fill_typed(out.data_ptr<double>(), ri, rows, cols, seed, base, p);
  // Other dtypes (bf16, half, ints, bool): draw in double, then cast.
  at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(at::kDouble));
  fill_typed(tmp.data_ptr<double>(), ri, rows, cols, seed, base, p);
  out.copy_(tmp);
}

}  // namespace vescale::random
