// Context parallelism's block attention on the GPU: in bf16 the blocks ring attention computes
// (a run against itself, causal; against a run wholly before it, all visible) take flash
// attention's kernels, forward and backward with the merged output and log-sum-exp. Two blocks
// merged give the attention of the queries to both runs: outputs, log-sum-exps and dq, dk, dv
// against the same inputs on the CPU in fp32 (the ATen path), within bf16's precision.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include "cuda/cuda_test_util.h"
#include "vescale/kernels/block_attention.h"

using namespace vescale;
namespace k = vescale::kernels;

namespace {

// max |a - b| / max |b|, on the CPU in fp32.
double relative(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.cpu().to(at::kFloat), y = b.cpu().to(at::kFloat);
  return (x - y).abs().max().item<double>() / std::max(1e-12, y.abs().max().item<double>());
}

struct Run {
  k::AttentionBlock merged;
  k::AttentionBlockGrads before, diagonal;  // the shares of the two key runs
};

// Queries at [n, 2n) against keys at [0, n) (all visible) and at [n, 2n) (the diagonal).
Run two_blocks(const at::Tensor& q, const at::Tensor& k0, const at::Tensor& v0,
               const at::Tensor& k1, const at::Tensor& v1, const at::Tensor& dout) {
  const int64_t n = q.size(2);
  const at::Tensor first = at::arange(0, n, at::kLong), second = at::arange(n, 2 * n, at::kLong);
  Run r;
  k::merge_blocks(r.merged, k::block_attention(q, k0, v0, second, first, true));
  k::merge_blocks(r.merged, k::block_attention(q, k1, v1, second, second, true));
  r.before =
      k::block_attention_backward(q, k0, v0, second, first, true, r.merged.out, r.merged.lse, dout);
  r.diagonal = k::block_attention_backward(q, k1, v1, second, second, true, r.merged.out,
                                           r.merged.lse, dout);
  return r;
}

}  // namespace

TEST_CASE("bf16 block attention on the GPU (flash kernels) equals the CPU's fp32 blocks",
          "[cuda]") {
  VESCALE_GPU_HALF();
  at::manual_seed(7);
  // Grouped-query heads: 4 query heads read 2 kv heads; head width 64.
  const int64_t B = 2, H = 4, Hkv = 2, n = 128, D = 64;
  auto make = [&](int64_t heads) { return at::randn({B, heads, n, D}).to(at::kBFloat16); };
  const at::Tensor q = make(H), k0 = make(Hkv), v0 = make(Hkv), k1 = make(Hkv), v1 = make(Hkv),
                   dout = make(H);
  const at::Device gpu(at::kCUDA);
  const Run got =
      two_blocks(q.to(gpu), k0.to(gpu), v0.to(gpu), k1.to(gpu), v1.to(gpu), dout.to(gpu));
  auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
  const Run want = two_blocks(f32(q), f32(k0), f32(v0), f32(k1), f32(v1), f32(dout));
  CHECK(got.merged.out.is_cuda());
  CHECK(relative(got.merged.out, want.merged.out) < 2e-2);
  CHECK(relative(got.merged.lse, want.merged.lse) < 1e-2);
  CHECK(relative(got.before.dq + got.diagonal.dq, want.before.dq + want.diagonal.dq) < 3e-2);
  CHECK(relative(got.before.dk, want.before.dk) < 3e-2);
  CHECK(relative(got.before.dv, want.before.dv) < 3e-2);
  CHECK(relative(got.diagonal.dk, want.diagonal.dk) < 3e-2);
  CHECK(relative(got.diagonal.dv, want.diagonal.dv) < 3e-2);
}
