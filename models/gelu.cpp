#include "gelu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <cmath>

#include "cpu_simd.h"

namespace models {
namespace {

constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// y and t = tanh(inner) for n elements; ATen's formula, operation for operation.
void forward_scalar(const float* x, float* y, float* t, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], th = std::tanh(kBeta * (v + kKappa * (v * v * v)));
    t[i] = th;
    y[i] = 0.5f * v * (1.0f + th);
  }
}

// d y / d x = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 kappa x^2), times the incoming gradient.
void backward_scalar(const float* g, const float* x, const float* t, float* gx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], th = t[i];
    const float left_derivative = 0.5f * (1.0f + th);
    const float right_derivative = 0.5f * v * (1.0f - th * th) * (kBeta * (1.0f + 3.0f * kKappa * (v * v)));
    gx[i] = g[i] * (left_derivative + right_derivative);
  }
}

#ifdef MODELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
void forward_avx2(const float* x, float* y, float* t, int64_t n) {
  const __m256 beta = _mm256_set1_ps(kBeta), kappa = _mm256_set1_ps(kKappa), half = _mm256_set1_ps(0.5f),
               one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 th = Sleef_tanhf8_u10(_mm256_mul_ps(beta, _mm256_add_ps(v, _mm256_mul_ps(kappa, cube))));
    _mm256_storeu_ps(t + i, th);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, th)));
  }
  forward_scalar(x + i, y + i, t + i, n - i);
}

void backward_avx2(const float* g, const float* x, const float* t, float* gx, int64_t n) {
  const __m256 beta = _mm256_set1_ps(kBeta), three_kappa = _mm256_set1_ps(3.0f * kKappa),
               half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i), th = _mm256_loadu_ps(t + i);
    const __m256 left_derivative = _mm256_mul_ps(half, _mm256_add_ps(one, th));
    const __m256 inner_derivative =
        _mm256_mul_ps(beta, _mm256_add_ps(one, _mm256_mul_ps(three_kappa, _mm256_mul_ps(v, v))));
    const __m256 right_derivative = _mm256_mul_ps(
        _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_sub_ps(one, _mm256_mul_ps(th, th))), inner_derivative);
    _mm256_storeu_ps(gx + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_add_ps(left_derivative, right_derivative)));
  }
  backward_scalar(g + i, x + i, t + i, gx + i, n - i);
}
#pragma GCC pop_options

// The same operations 16 wide (ATen's gelu runs its AVX-512 kernel where the CPU has one).
#pragma GCC push_options
#pragma GCC target("avx512f")
void forward_avx512(const float* x, float* y, float* t, int64_t n) {
  const __m512 beta = _mm512_set1_ps(kBeta), kappa = _mm512_set1_ps(kKappa), half = _mm512_set1_ps(0.5f),
               one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 cube = _mm512_mul_ps(_mm512_mul_ps(v, v), v);
    const __m512 th = Sleef_tanhf16_u10(_mm512_mul_ps(beta, _mm512_add_ps(v, _mm512_mul_ps(kappa, cube))));
    _mm512_storeu_ps(t + i, th);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, th)));
  }
  forward_scalar(x + i, y + i, t + i, n - i);
}

void backward_avx512(const float* g, const float* x, const float* t, float* gx, int64_t n) {
  const __m512 beta = _mm512_set1_ps(kBeta), three_kappa = _mm512_set1_ps(3.0f * kKappa),
               half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i), th = _mm512_loadu_ps(t + i);
    const __m512 left_derivative = _mm512_mul_ps(half, _mm512_add_ps(one, th));
    const __m512 inner_derivative =
        _mm512_mul_ps(beta, _mm512_add_ps(one, _mm512_mul_ps(three_kappa, _mm512_mul_ps(v, v))));
    const __m512 right_derivative = _mm512_mul_ps(
        _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_sub_ps(one, _mm512_mul_ps(th, th))), inner_derivative);
    _mm512_storeu_ps(gx + i, _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_add_ps(left_derivative, right_derivative)));
  }
  backward_scalar(g + i, x + i, t + i, gx + i, n - i);
}
#pragma GCC pop_options
#endif

void forward_cpu(const float* x, float* y, float* t, int64_t n) {
#ifdef MODELS_X86_SIMD
  if (simd::level() == simd::Level::avx512) return forward_avx512(x, y, t, n);
  if (simd::level() == simd::Level::avx2) return forward_avx2(x, y, t, n);
#endif
  forward_scalar(x, y, t, n);
}

void backward_cpu(const float* g, const float* x, const float* t, float* gx, int64_t n) {
#ifdef MODELS_X86_SIMD
  if (simd::level() == simd::Level::avx512) return backward_avx512(g, x, t, gx, n);
  if (simd::level() == simd::Level::avx2) return backward_avx2(g, x, t, gx, n);
#endif
  backward_scalar(g, x, t, gx, n);
}

constexpr int64_t kGrain = 32768;

struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input) {
    const at::Tensor x = input.contiguous();
    at::Tensor y = at::empty_like(x), t = at::empty_like(x);
    const float* xp = x.const_data_ptr<float>();
    float *yp = y.mutable_data_ptr<float>(), *tp = t.mutable_data_ptr<float>();
    at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
      forward_cpu(xp + begin, yp + begin, tp + begin, end - begin);
    });
    ctx->save_for_backward({x, t});
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor g = grads[0].contiguous();
    at::Tensor gx = at::empty_like(saved[0]);
    const float *gp = g.const_data_ptr<float>(), *xp = saved[0].const_data_ptr<float>(),
                *tp = saved[1].const_data_ptr<float>();
    float* out = gx.mutable_data_ptr<float>();
    at::parallel_for(0, gx.numel(), kGrain, [&](int64_t begin, int64_t end) {
      backward_cpu(gp + begin, xp + begin, tp + begin, out + begin, end - begin);
    });
    return {gx};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  const bool fused = x.device().is_cpu() && x.scalar_type() == at::kFloat && x.requires_grad() &&
                     at::GradMode::is_enabled() && x.layout() == at::kStrided;
  if (!fused) return at::gelu(x, "tanh");
  RECORD_FUNCTION("models::gelu_tanh", std::vector<c10::IValue>{});  // for op profiles
  return GeluTanhFunction::apply(x);
}

}  // namespace models
