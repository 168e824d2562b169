#include "vescale/kernels/cross_entropy.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/cpu_simd.h"
#include "vescale/common/check.h"

namespace vescale::kernels {
namespace {

// Row kernels. A row's logsumexp is kept as its max m and l = log(sum exp(x - m)), apart, so
// that x - m stays exact for large logits: -log p(target) = (m - x[t]) + l, and the gradient row
// is exp((x - m) - l) * s, minus s at the target. On x86-64 with AVX2 they run 8 lanes at a time
// through SLEEF's expf (the one ATen's vectorised log_softmax uses, exported by libtorch_cpu);
// elsewhere a scalar loop. NaN or +inf anywhere in a row makes its lse NaN, as with log_softmax, so
// the trainer's NaN/inf stop still sees it.

struct RowStats {
  float max, log_sum;
};

RowStats row_stats_scalar(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return {m, std::log(s)};
}

void row_grad_scalar(const float* x, RowStats r, float scale, float* g, int64_t n) {
  for (int64_t j = 0; j < n; ++j) g[j] = std::exp((x[j] - r.max) - r.log_sum) * scale;
}

#ifdef KERNELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")

// The last n % 8 elements, padded with `pad` (exp(-inf - c) = 0 adds nothing to a sum).
__m256 load_tail(const float* x, int64_t n, float pad) {
  alignas(32) float buf[8];
  for (int64_t j = 0; j < 8; ++j) buf[j] = j < n ? x[j] : pad;
  return _mm256_load_ps(buf);
}

float hsum(__m256 v) {
  alignas(32) float b[8];
  _mm256_store_ps(b, v);
  return ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]));
}

RowStats row_stats_avx2(const float* x, int64_t n) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t body = n - n % 8;
  // The max may skip a NaN; its exp in the sum below does not.
  __m256 m8 = _mm256_set1_ps(ninf);
  for (int64_t j = 0; j < body; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(x + j));
  if (body < n) m8 = _mm256_max_ps(m8, load_tail(x + body, n - body, ninf));
  alignas(32) float b[8];
  _mm256_store_ps(b, m8);
  float m = b[0];
  for (int k = 1; k < 8; ++k) m = b[k] > m ? b[k] : m;
  const __m256 mv = _mm256_set1_ps(m);
  __m256 s8 = _mm256_setzero_ps();
  for (int64_t j = 0; j < body; j += 8)
    s8 = _mm256_add_ps(s8, Sleef_expf8_u10(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv)));
  if (body < n)
    s8 = _mm256_add_ps(s8, Sleef_expf8_u10(_mm256_sub_ps(load_tail(x + body, n - body, ninf), mv)));
  return {m, std::log(hsum(s8))};  // m = +inf gives inf - inf = NaN in the sum: NaN
}

void row_grad_avx2(const float* x, RowStats r, float scale, float* g, int64_t n) {
  const int64_t body = n - n % 8;
  const __m256 mv = _mm256_set1_ps(r.max), lv = _mm256_set1_ps(r.log_sum),
               sv = _mm256_set1_ps(scale);
  auto grad8 = [&](__m256 v) {
    return _mm256_mul_ps(Sleef_expf8_u10(_mm256_sub_ps(_mm256_sub_ps(v, mv), lv)), sv);
  };
  for (int64_t j = 0; j < body; j += 8) _mm256_storeu_ps(g + j, grad8(_mm256_loadu_ps(x + j)));
  if (body < n) {
    alignas(32) float out[8];
    _mm256_store_ps(out, grad8(load_tail(x + body, n - body, 0.0f)));
    for (int64_t j = body; j < n; ++j) g[j] = out[j - body];
  }
}
#pragma GCC pop_options
#endif

bool use_avx2() { return simd_level() != SimdLevel::scalar; }

RowStats row_stats(const float* x, int64_t n) {
#ifdef KERNELS_X86_SIMD
  if (use_avx2()) return row_stats_avx2(x, n);
#endif
  return row_stats_scalar(x, n);
}

void row_grad(const float* x, RowStats r, float scale, float* g, int64_t n) {
#ifdef KERNELS_X86_SIMD
  if (use_avx2()) return row_grad_avx2(x, r, scale, g, n);
#endif
  row_grad_scalar(x, r, scale, g, n);
}

// Rows per parallel task: enough work per task to be worth a thread.
int64_t grain(int64_t v) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, v)); }

std::tuple<at::Tensor, at::Tensor> cross_entropy_forward_cpu(const at::Tensor& logits,
                                                             const at::Tensor& targets) {
  const at::Tensor x = logits.contiguous(), t = targets.contiguous();
  const int64_t n = x.size(0), v = x.size(1);
  const float* xp = x.const_data_ptr<float>();
  const int64_t* tp = t.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    VESCALE_CHECK(tp[i] >= 0 && tp[i] < v, "cross_entropy: target ", tp[i], " at row ", i,
                  " is outside [0, ", v, "); targets are class indices of the logits' last dim");
  at::Tensor stats = at::empty({n, 2}, x.options());  // per row: max, log_sum
  auto* sp = reinterpret_cast<RowStats*>(stats.mutable_data_ptr<float>());
  at::parallel_for(0, n, grain(v), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sp[i] = row_stats(xp + i * v, v);
  });
  double sum = 0;  // the mean of -log p(target), in double
  for (int64_t i = 0; i < n; ++i)
    sum += static_cast<double>(sp[i].max - xp[i * v + tp[i]]) + sp[i].log_sum;
  return {at::scalar_tensor(n > 0 ? sum / static_cast<double>(n) : std::nan(""), x.options()),
          stats};
}

at::Tensor cross_entropy_backward_cpu(const at::Tensor& grad, const at::Tensor& logits,
                                      const at::Tensor& targets, const at::Tensor& stats) {
  const at::Tensor x = logits.contiguous(), t = targets.contiguous();
  const int64_t n = x.size(0), v = x.size(1);
  at::Tensor g = at::empty_like(x);
  const float scale = grad.item<float>() / static_cast<float>(n);
  const float* xp = x.const_data_ptr<float>();
  const auto* sp = reinterpret_cast<const RowStats*>(stats.const_data_ptr<float>());
  const int64_t* tp = t.const_data_ptr<int64_t>();
  float* gp = g.mutable_data_ptr<float>();
  at::parallel_for(0, n, grain(v), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      row_grad(xp + i * v, sp[i], scale, gp + i * v, v);
      gp[i * v + tp[i]] -= scale;
    }
  });
  return g;
}

struct CrossEntropyFunction : torch::autograd::Function<CrossEntropyFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets) {
    static auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("vescale::cross_entropy_forward", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&)>();
    auto [loss, stats] = op.call(logits, targets);
    ctx->save_for_backward({logits, targets, stats});
    return loss;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::cross_entropy_backward", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const at::Tensor&)>();
    const auto s = ctx->get_saved_variables();
    return {op.call(grads[0], s[0], s[1], s[2]), at::Tensor()};
  }
};

at::Tensor cross_entropy_composite(const at::Tensor& logits, const at::Tensor& targets) {
  VESCALE_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "cross_entropy: expects logits [N, V] and targets [N], got ", logits.sizes(),
                " and ", targets.sizes());
  // DTensors (vocab-sharded under tensor parallelism) take ATen's path and its rules.
  const bool fused = cpu_float(logits) && targets.scalar_type() == at::kLong &&
                     targets.device().is_cpu() && logits.size(1) > 0;
  if (!fused) return at::cross_entropy_loss(logits, targets);
  return CrossEntropyFunction::apply(logits, targets);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(vescale, m) {
  m.def("cross_entropy(Tensor logits, Tensor targets) -> Tensor");
  m.def("cross_entropy_forward(Tensor logits, Tensor targets) -> (Tensor, Tensor)");
  m.def(
      "cross_entropy_backward(Tensor grad, Tensor logits, Tensor targets, Tensor stats) -> "
      "Tensor");
}

TORCH_LIBRARY_IMPL(vescale, CompositeImplicitAutograd, m) {
  m.impl("cross_entropy", TORCH_FN(cross_entropy_composite));
}

TORCH_LIBRARY_IMPL(vescale, CPU, m) {
  m.impl("cross_entropy_forward", TORCH_FN(cross_entropy_forward_cpu));
  m.impl("cross_entropy_backward", TORCH_FN(cross_entropy_backward_cpu));
}

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("vescale::cross_entropy", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(logits, targets);
}

}  // namespace vescale::kernels
