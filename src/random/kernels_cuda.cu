// The CUDA kernel: one thread per local element, the same element_value() as the CPU kernel
// (built with --fmad=false so that no multiply-add is fused).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "random/kernels.h"
#include "vescale/common/check.h"

namespace vescale::random {

namespace {

constexpr int kMaxDims = 8;
struct Region {
  int nd;
  int64_t local[kMaxDims], offset[kMaxDims], gstride[kMaxDims];
};

template <typename T>
__global__ void fill_kernel(T* out, int64_t n, Region r, uint64_t seed, uint64_t base,
                            DistParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, g = 0;
    for (int d = r.nd - 1; d >= 0; --d) {
      const int64_t j = rest % r.local[d];
      rest /= r.local[d];
      g += (r.offset[d] + j) * r.gstride[d];
    }
    out[i] = static_cast<T>(element_value(seed, base, static_cast<uint64_t>(g), p));
  }
}

}  // namespace

void fill_region_cuda(at::Tensor& out, const std::vector<int64_t>& global_shape,
                      const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                      const DistParams& p) {
  VESCALE_CHECK(out.is_contiguous(), "random: the output must be contiguous");
  VESCALE_CHECK(out.dim() <= kMaxDims, "random: at most ", kMaxDims, " dims on CUDA, got ",
                out.dim());
  const int64_t n = out.numel();
  if (n == 0) return;
  Region r{static_cast<int>(out.dim()), {}, {}, {}};
  int64_t stride = 1;
  for (int d = r.nd - 1; d >= 0; --d) {
    r.local[d] = out.size(d);
    r.offset[d] = offset[d];
    r.gstride[d] = stride;
    stride *= global_shape[d];
  }
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
  auto stream = at::cuda::getCurrentCUDAStream();
  at::Tensor target = (out.scalar_type() == at::kFloat || out.scalar_type() == at::kDouble)
                          ? out
                          : at::empty(out.sizes(), out.options().dtype(at::kDouble));
  if (target.scalar_type() == at::kFloat)
    fill_kernel<float>
        <<<blocks, threads, 0, stream>>>(target.data_ptr<float>(), n, r, seed, base, p);
  else
    fill_kernel<double>
        <<<blocks, threads, 0, stream>>>(target.data_ptr<double>(), n, r, seed, base, p);
  const cudaError_t err = cudaGetLastError();
  VESCALE_CHECK(err == cudaSuccess, "random: CUDA kernel launch failed: ", cudaGetErrorString(err));
  if (!target.is_same(out)) out.copy_(target);
}

}  // namespace vescale::random
