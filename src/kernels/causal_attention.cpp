#include "vescale/kernels/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/cpu_simd.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/dtensor/sharding_rule.h"

namespace vescale::kernels {
namespace {

// Rows of queries per block: each block's scores reach only the keys up to its last row, so the
// GEMMs skip the upper triangle in steps of this many columns.
constexpr int64_t kRows = 32;
// Above this many bytes of probabilities per call, flash attention's O(T) memory wins.
constexpr int64_t kMaxProbBytes = int64_t{64} << 20;

// s[0, len) <- softmax(scale * s[0, len)); s[len, ncols) <- 0 (the masked keys of this block).
void softmax_scalar(float* s, int64_t len, int64_t ncols, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < len; ++j) mx = std::max(mx, s[j]);
  float sum = 0;
  for (int64_t j = 0; j < len; ++j) sum += (s[j] = std::exp((s[j] - mx) * scale));
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) s[j] *= inv;
  std::fill(s + len, s + ncols, 0.0f);
}

#ifdef KERNELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

float hmax(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

void softmax_avx2(float* s, int64_t len, int64_t ncols, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  if (len >= 8) {
    __m256 m8 = _mm256_loadu_ps(s);
    for (j = 8; j + 8 <= len; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(s + j));
    mx = hmax(m8);
  }
  for (; j < len; ++j) mx = std::max(mx, s[j]);
  const __m256 mx8 = _mm256_set1_ps(mx), scale8 = _mm256_set1_ps(scale);
  __m256 sum8 = _mm256_setzero_ps();
  for (j = 0; j + 8 <= len; j += 8) {
    const __m256 e =
        Sleef_expf8_u10(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), mx8), scale8));
    _mm256_storeu_ps(s + j, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = hsum(sum8);
  for (; j < len; ++j) sum += (s[j] = std::exp((s[j] - mx) * scale));
  const float inv = 1.0f / sum;
  const __m256 inv8 = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= len; j += 8)
    _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv8));
  for (; j < len; ++j) s[j] *= inv;
  std::fill(s + len, s + ncols, 0.0f);
}
#pragma GCC pop_options
#endif

void softmax_row(float* s, int64_t len, int64_t ncols, float scale) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() != SimdLevel::scalar) return softmax_avx2(s, len, ncols, scale);
#endif
  softmax_scalar(s, len, ncols, scale);
}

// dst[c, r] = src[r, c] for r < rows, c < cols (row-major, leading dims given).
void transpose_scalar(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t rows,
                      int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld_dst + r] = src[r * ld_src + c];
}

#ifdef KERNELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
void transpose8x8(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ld_dst, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ld_dst, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

void transpose_avx2(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t rows,
                    int64_t cols) {
  const int64_t rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int64_t r = 0; r < rows8; r += 8)
    for (int64_t c = 0; c < cols8; c += 8)
      transpose8x8(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
  transpose_scalar(src + cols8, ld_src, dst + cols8 * ld_dst, ld_dst, rows, cols - cols8);
  transpose_scalar(src + rows8 * ld_src, ld_src, dst + rows8, ld_dst, rows - rows8, cols8);
}
#pragma GCC pop_options
#endif

void transpose(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t rows,
               int64_t cols) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() != SimdLevel::scalar)
    return transpose_avx2(src, ld_src, dst, ld_dst, rows, cols);
#endif
  transpose_scalar(src, ld_src, dst, ld_dst, rows, cols);
}

// Row-major C[m, n] = A[m, k] B[k, n] (+ C): ATen's batch-reduce GEMM, oneDNN's small-matrix
// kernel where the CPU has it (no packing, no separate zeroing of C), else BLAS.
void small_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, bool add, float* c, int64_t ldc) {
  if (m > 0 && n > 0)
    at::native::cpublas::brgemm(m, n, k, lda, ldb, ldc, add, a, b, c, /*is_vnni=*/false);
}

// One head's [T, D] matrix inside a [B, H, T, D] tensor with unit stride in D.
struct HeadView {
  const at::Tensor& t;
  float* at(int64_t b, int64_t h) const {
    return const_cast<float*>(t.const_data_ptr<float>()) + b * t.stride(0) + h * t.stride(1);
  }
  int64_t ld() const { return t.stride(2); }
};

// [B, H, T, D] laid out as [B, T, H, D]: heads interleaved per token, which is the layout the
// model's next step (transpose back and merge the heads) reads without a copy.
at::Tensor empty_heads_interleaved(const at::Tensor& like) {
  const int64_t B = like.size(0), H = like.size(1), T = like.size(2), D = like.size(3);
  return at::empty_strided({B, H, T, D}, {T * H * D, D, H * D, 1}, like.options());
}

// What the GEMMs read: unit stride along D and rows that do not overlap (an expanded T gives
// stride 0); heads and batches may be anywhere, expanded included.
at::Tensor gemm_ready(const at::Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) >= t.size(3) ? t : t.contiguous();
}

// kt: [D, T] scratch for K^T.
void forward_head(const float* q, int64_t lq, const float* k, int64_t lk, const float* v,
                  int64_t lv, float* o, int64_t lo, float* p, float* kt, int64_t T, int64_t D,
                  float scale) {
  transpose(k, lk, kt, T, T, D);
  for (int64_t r0 = 0; r0 < T; r0 += kRows) {
    const int64_t rows = std::min(kRows, T - r0), ncols = r0 + rows;
    float* s = p + r0 * T;
    small_gemm(rows, ncols, D, q + r0 * lq, lq, kt, T, false, s,
               T);  // S = Q K^T, scaled in the softmax
    for (int64_t i = 0; i < rows; ++i) softmax_row(s + i * T, r0 + i + 1, ncols, scale);
    small_gemm(rows, D, ncols, s, T, v, lv, false, o + r0 * lo, lo);  // O = P V
  }
}

// Row i of dS, scaled: ds[j] = scale p[j] (ds[j] - delta) for the keys j < len, 0 for the
// masked rest of the block, with delta = dO_i . O_i (= rowsum(dP * P)).
void ds_row_scalar(const float* go, const float* o, int64_t D, const float* p, float* ds,
                   int64_t len, int64_t ncols, float scale) {
  float delta = 0;
  for (int64_t d = 0; d < D; ++d) delta += go[d] * o[d];
  for (int64_t j = 0; j < len; ++j) ds[j] = scale * p[j] * (ds[j] - delta);
  std::fill(ds + len, ds + ncols, 0.0f);
}

#ifdef KERNELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
void ds_row_avx2(const float* go, const float* o, int64_t D, const float* p, float* ds, int64_t len,
                 int64_t ncols, float scale) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= D; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(go + d), _mm256_loadu_ps(o + d), acc);
  float delta = hsum(acc);
  for (; d < D; ++d) delta += go[d] * o[d];
  const __m256 delta8 = _mm256_set1_ps(delta), scale8 = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= len; j += 8)
    _mm256_storeu_ps(ds + j, _mm256_mul_ps(_mm256_mul_ps(scale8, _mm256_loadu_ps(p + j)),
                                           _mm256_sub_ps(_mm256_loadu_ps(ds + j), delta8)));
  for (; j < len; ++j) ds[j] = scale * p[j] * (ds[j] - delta);
  std::fill(ds + len, ds + ncols, 0.0f);
}
#pragma GCC pop_options
#endif

void ds_row(const float* go, const float* o, int64_t D, const float* p, float* ds, int64_t len,
            int64_t ncols, float scale) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() != SimdLevel::scalar) return ds_row_avx2(go, o, D, p, ds, len, ncols, scale);
#endif
  ds_row_scalar(go, o, D, p, ds, len, ncols, scale);
}

// Scratch for one head's backward, [D, T] each unless noted.
struct BackwardScratch {
  explicit BackwardScratch(int64_t T, int64_t D)
      : ds(static_cast<size_t>(kRows * T)),
        vt(D * T),
        got(D * T),
        qt(D * T),
        dvt(D * T),
        dkt(D * T) {}
  std::vector<float> ds;  // [kRows, T]
  std::vector<float> vt, got, qt, dvt, dkt;
};

// dV^T += dO^T P; dS = s P * (dO V^T - rowsum(dO * O)); dQ = dS K; dK^T += Q^T dS (s the softmax
// scale). The transposed forms keep every GEMM free of transposed operands (V, dO and Q are
// transposed once per head, dV and dK once at the end). The blocks run last to first: the last
// one reaches every key, so it writes dK^T and dV^T and the others add to them, with no zero fill.
void backward_head(const float* q, int64_t lq, const float* k, int64_t lk, const float* v,
                   int64_t lv, const float* o, int64_t lo, const float* go, int64_t lgo,
                   const float* p, float* dq, int64_t ldq, float* dk, int64_t ldk, float* dv,
                   int64_t ldv, BackwardScratch& w, int64_t T, int64_t D, float scale) {
  transpose(v, lv, w.vt.data(), T, T, D);
  transpose(go, lgo, w.got.data(), T, T, D);
  transpose(q, lq, w.qt.data(), T, T, D);
  float* ds = w.ds.data();
  const int64_t last = (T - 1) / kRows * kRows;
  for (int64_t r0 = last; r0 >= 0; r0 -= kRows) {
    const int64_t rows = std::min(kRows, T - r0), ncols = r0 + rows;
    const float* pr = p + r0 * T;
    const bool accumulate = r0 != last;
    small_gemm(D, ncols, rows, w.got.data() + r0, T, pr, T, accumulate, w.dvt.data(),
               T);  // dV^T += dO^T P
    small_gemm(rows, ncols, D, go + r0 * lgo, lgo, w.vt.data(), T, false, ds,
               ncols);  // dP = dO V^T
    for (int64_t i = 0; i < rows; ++i)
      ds_row(go + (r0 + i) * lgo, o + (r0 + i) * lo, D, pr + i * T, ds + i * ncols, r0 + i + 1,
             ncols, scale);
    small_gemm(rows, D, ncols, ds, ncols, k, lk, false, dq + r0 * ldq, ldq);  // dQ = dS K
    small_gemm(D, ncols, rows, w.qt.data() + r0, T, ds, ncols, accumulate, w.dkt.data(),
               T);  // dK^T += Q^T dS
  }
  transpose(w.dvt.data(), T, dv, ldv, D, T);
  transpose(w.dkt.data(), T, dk, ldk, D, T);
}

// out (laid out by empty_heads_interleaved) and the probabilities [B, H, T, T] of q, k, v.
at::Tensor forward_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         at::Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  at::Tensor probs = at::empty({B, H, T, T}, q.options());
  const HeadView Q{q}, K{k}, V{v}, O{out};
  float* P = probs.mutable_data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kt(static_cast<size_t>(D * T));
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      forward_head(Q.at(b, h), Q.ld(), K.at(b, h), K.ld(), V.at(b, h), V.ld(), O.at(b, h), O.ld(),
                   P + bh * T * T, kt.data(), T, D, scale);
    }
    at::native::cpublas::brgemm_release(/*is_vnni=*/false);
  });
  return probs;
}

// dq, dk, dv (any [B, H, T, D] views with unit stride in D) from the saved forward and dO.
void backward_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& out, const at::Tensor& probs, const at::Tensor& go,
                    const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const HeadView Q{q}, K{k}, V{v}, O{out}, GO{go}, DQ{dq}, DK{dk}, DV{dv};
  const float* P = probs.const_data_ptr<float>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    BackwardScratch scratch(T, D);
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      backward_head(Q.at(b, h), Q.ld(), K.at(b, h), K.ld(), V.at(b, h), V.ld(), O.at(b, h), O.ld(),
                    GO.at(b, h), GO.ld(), P + bh * T * T, DQ.at(b, h), DQ.ld(), DK.at(b, h),
                    DK.ld(), DV.at(b, h), DV.ld(), scratch, T, D, scale);
    }
    at::native::cpublas::brgemm_release(/*is_vnni=*/false);
  });
}

// The kernel as ops: forward (out, probs) and backward, CPU kernels that the DTensor rules below
// hand plain shards. Empty shards (uneven splits) give empty results.
std::tuple<at::Tensor, at::Tensor> attention_forward_cpu(const at::Tensor& query,
                                                         const at::Tensor& key,
                                                         const at::Tensor& value) {
  const at::Tensor q = gemm_ready(query), k = gemm_ready(key), v = gemm_ready(value);
  at::Tensor out = empty_heads_interleaved(q);
  if (q.numel() == 0)
    return {out, at::empty({q.size(0), q.size(1), q.size(2), q.size(2)}, q.options())};
  at::Tensor probs = forward_heads(q, k, v, out);
  return {out, probs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cpu(
    const at::Tensor& grad, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& out, const at::Tensor& probs) {
  const at::Tensor q = gemm_ready(query);
  at::Tensor dq = empty_heads_interleaved(q), dk = empty_heads_interleaved(q),
             dv = empty_heads_interleaved(q);
  if (q.numel() > 0)
    backward_heads(q, gemm_ready(key), gemm_ready(value), gemm_ready(out), probs, gemm_ready(grad),
                   dq, dk, dv);
  return {dq, dk, dv};
}

// q, k and v as [B, H, T, D] views of a packed [B, T, 3C] tensor.
std::array<at::Tensor, 3> packed_heads(const at::Tensor& qkv, int64_t n_head) {
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  const auto parts = qkv.split(C, 2);
  std::array<at::Tensor, 3> heads;
  for (size_t i = 0; i < 3; ++i)
    heads[i] = parts[i].view({B, T, n_head, C / n_head}).transpose(1, 2);
  return heads;
}

std::tuple<at::Tensor, at::Tensor> packed_forward_cpu(const at::Tensor& packed, int64_t n_head) {
  const at::Tensor qkv = packed.contiguous();
  const auto [q, k, v] = packed_heads(qkv, n_head);
  at::Tensor out = empty_heads_interleaved(q);
  if (q.numel() == 0)
    return {out, at::empty({q.size(0), q.size(1), q.size(2), q.size(2)}, q.options())};
  at::Tensor probs = forward_heads(q, k, v, out);
  return {out, probs};
}

at::Tensor packed_backward_cpu(const at::Tensor& grad, const at::Tensor& packed, int64_t n_head,
                               const at::Tensor& out, const at::Tensor& probs) {
  const at::Tensor qkv = packed.contiguous();
  const auto [q, k, v] = packed_heads(qkv, n_head);
  at::Tensor dqkv = at::empty_like(qkv);
  const auto [dq, dk, dv] = packed_heads(dqkv, n_head);
  if (q.numel() > 0) backward_heads(q, k, v, gemm_ready(out), probs, gemm_ready(grad), dq, dk, dv);
  return dqkv;
}

// The autograd functions call the ops through the dispatcher, so a DTensor reaches its rule.
struct CausalAttentionFunction : torch::autograd::Function<CausalAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::causal_attention_forward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
    auto [out, probs] = op.call(q, k, v);
    ctx->save_for_backward({q, k, v, out, probs});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::causal_attention_backward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
    const auto s = ctx->get_saved_variables();
    auto [dq, dk, dv] = op.call(grads[0], s[0], s[1], s[2], s[3], s[4]);
    return {dq, dk, dv};
  }
};

struct PackedCausalAttentionFunction : torch::autograd::Function<PackedCausalAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& qkv,
                            int64_t n_head) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::causal_attention_packed_forward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t)>();
    auto [out, probs] = op.call(qkv, n_head);
    ctx->save_for_backward({qkv, out, probs});
    ctx->saved_data["n_head"] = n_head;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::causal_attention_packed_backward", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t,
                                           const at::Tensor&, const at::Tensor&)>();
    const auto s = ctx->get_saved_variables();
    return {op.call(grads[0], s[0], ctx->saved_data["n_head"].toInt(), s[1], s[2]), at::Tensor()};
  }
};

// Whether the kernel takes q, k, v: CPU fp32 (shards of a DTensor included), no dropout, and
// probabilities of at most kMaxProbBytes for the global shapes (one device and a sharded run
// choose alike).
// Whether the probabilities of [B, H, T, D] heads fit the kernel: at most kMaxProbBytes for the
// global shapes (one device and a sharded run choose alike).
bool fits_kernel(int64_t B, int64_t H, int64_t T, int64_t D) {
  // Leading dims within int, as the BLAS behind brgemm's fallback takes them.
  const int64_t limit = std::numeric_limits<int>::max();
  // T first, so that B * H * T * T cannot overflow.
  return B * H * T > 0 && D > 0 && T * T * 4 <= kMaxProbBytes &&
         B * H * T * T * 4 <= kMaxProbBytes && T * H * D < limit;
}

// Whether the kernel takes q, k, v: CPU fp32 (shards of a DTensor included), no dropout.
bool use_kernel(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  if (dropout_p > 0.0) return false;
  for (const at::Tensor* t : {&q, &k, &v})
    if (!kernel_input(*t) || t->dim() != 4 || t->sizes() != q.sizes()) return false;
  return fits_kernel(q.size(0), q.size(1), q.size(2), q.size(3));
}

// A DTensor in the placements the kernel's rule takes (`keep_below`: the dims whose shards stay),
// redistributed here, above the autograd function: the function then saves the tensor it
// computed with, and backward gathers nothing again.
at::Tensor as_rule_takes(const at::Tensor& t, int64_t keep_below) {
  if (!dtensor::is_dtensor(t)) return t;
  const auto& spec = dtensor::spec_of(t);
  auto want = dtensor::shards_below(spec, keep_below);
  return want == spec.placements ? t : dtensor::redistribute(t, std::move(want));
}

at::Tensor causal_attention_composite(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      double dropout_p) {
  if (!use_kernel(q, k, v, dropout_p))
    return at::scaled_dot_product_attention(q, k, v, {}, dropout_p, /*is_causal=*/true);
  // Every input in the query's batch and head shards (the rule's choice).
  const at::Tensor qr = as_rule_takes(q, 2);
  const auto same_as_q = [&](const at::Tensor& t) {
    return dtensor::is_dtensor(qr) && dtensor::is_dtensor(t) &&
                   dtensor::spec_of(t).placements != dtensor::spec_of(qr).placements
               ? dtensor::redistribute(t, dtensor::spec_of(qr).placements)
               : t;
  };
  return CausalAttentionFunction::apply(qr, same_as_q(k), same_as_q(v));
}

at::Tensor causal_attention_packed_composite(const at::Tensor& qkv, int64_t n_head,
                                             double dropout_p) {
  TORCH_CHECK(qkv.dim() == 3 && n_head > 0 && qkv.size(2) % (3 * n_head) == 0,
              "causal_attention_packed: qkv must be [B, T, 3C] with C divisible by n_head (",
              n_head, "), got ", qkv.sizes());
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  at::Tensor out;
  if (dropout_p == 0.0 && kernel_input(qkv) && fits_kernel(B, n_head, T, C / n_head)) {
    out = PackedCausalAttentionFunction::apply(as_rule_takes(qkv, 1), n_head);
  } else {
    const auto [q, k, v] = packed_heads(qkv, n_head);
    out = at::scaled_dot_product_attention(q, k, v, {}, dropout_p, /*is_causal=*/true);
  }
  return out.transpose(1, 2).reshape({B, T, C});
}

// DTensor rules: attention is independent per (batch, head), so batch and head shards of the
// query stay for every attention tensor; anything else gathers. The packed input keeps a batch
// shard only: a column-parallel qkv's shards are not head-aligned.
using dtensor::OpCall;
using dtensor::Strategy;

std::vector<int64_t> probs_shape(const std::vector<int64_t>& q) { return {q[0], q[1], q[2], q[2]}; }

Strategy forward_rule(const OpCall& call) {
  const auto& q = call.specs[0];
  const auto p = dtensor::shards_below(q, 2);
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  st.outputs = {p, p};
  st.output_shapes = {q.shape, probs_shape(q.shape)};
  return st;
}

// (grad, q, k, v, out, probs) -> (dq, dk, dv)
Strategy backward_rule(const OpCall& call) {
  const auto& q = call.specs[1];
  const auto p = dtensor::shards_below(q, 2);
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  st.outputs = {p, p, p};
  st.output_shapes = {q.shape, q.shape, q.shape};
  return st;
}

std::vector<int64_t> packed_out_shape(const std::vector<int64_t>& qkv, int64_t n_head) {
  return {qkv[0], n_head, qkv[1], qkv[2] / 3 / n_head};
}

Strategy packed_forward_rule(const OpCall& call) {
  const auto& x = call.specs[0];
  const auto p = dtensor::shards_below(x, 1);
  const int64_t n_head = call.arg("n_head").toInt();
  const auto out = packed_out_shape(x.shape, n_head);
  Strategy st;
  st.inputs = {p};
  st.outputs = {p, p};
  st.output_shapes = {out, probs_shape(out)};
  return st;
}

// (grad, qkv, n_head, out, probs) -> dqkv
Strategy packed_backward_rule(const OpCall& call) {
  const auto& x = call.specs[1];
  const auto p = dtensor::shards_below(x, 1);
  Strategy st;
  st.inputs.assign(call.specs.size(), p);
  st.outputs = {p};
  st.output_shapes = {x.shape};
  return st;
}

struct RuleRegistrar {
  RuleRegistrar() {
    dtensor::register_rule("vescale::causal_attention_forward", forward_rule);
    dtensor::register_rule("vescale::causal_attention_backward", backward_rule);
    dtensor::register_rule("vescale::causal_attention_packed_forward", packed_forward_rule);
    dtensor::register_rule("vescale::causal_attention_packed_backward", packed_backward_rule);
  }
};
const RuleRegistrar rule_registrar;

}  // namespace

TORCH_LIBRARY_FRAGMENT(vescale, m) {
  m.def("causal_attention(Tensor q, Tensor k, Tensor v, float dropout_p=0.0) -> Tensor");
  m.def("causal_attention_forward(Tensor q, Tensor k, Tensor v) -> (Tensor, Tensor)");
  m.def(
      "causal_attention_backward(Tensor grad, Tensor q, Tensor k, Tensor v, Tensor out, "
      "Tensor probs) -> (Tensor, Tensor, Tensor)");
  m.def("causal_attention_packed(Tensor qkv, int n_head, float dropout_p=0.0) -> Tensor");
  m.def("causal_attention_packed_forward(Tensor qkv, int n_head) -> (Tensor, Tensor)");
  m.def(
      "causal_attention_packed_backward(Tensor grad, Tensor qkv, int n_head, Tensor out, "
      "Tensor probs) -> Tensor");
}

TORCH_LIBRARY_IMPL(vescale, CompositeImplicitAutograd, m) {
  m.impl("causal_attention", TORCH_FN(causal_attention_composite));
  m.impl("causal_attention_packed", TORCH_FN(causal_attention_packed_composite));
}

TORCH_LIBRARY_IMPL(vescale, CPU, m) {
  m.impl("causal_attention_forward", TORCH_FN(attention_forward_cpu));
  m.impl("causal_attention_backward", TORCH_FN(attention_backward_cpu));
  m.impl("causal_attention_packed_forward", TORCH_FN(packed_forward_cpu));
  m.impl("causal_attention_packed_backward", TORCH_FN(packed_backward_cpu));
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            double dropout_p) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("vescale::causal_attention", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, double)>();
  return op.call(q, k, v, dropout_p);
}

at::Tensor causal_attention_packed(const at::Tensor& qkv, int64_t n_head, double dropout_p) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("vescale::causal_attention_packed", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, double)>();
  return op.call(qkv, n_head, dropout_p);
}

}  // namespace vescale::kernels
