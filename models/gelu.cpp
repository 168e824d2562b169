#include "gelu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstring>

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
// The vector loops, written once over a GCC vector type (__m256 or __m512, whose operators are
// the packed instructions) and inlined into one wrapper per instruction set, which compiles them
// for its width. Same operations in the same order as the scalar loops. Return the elements done.
// (-Wpsabi: GCC notes the vector ABI of these templates, which are only ever inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <class Vec, Vec (*Tanh)(Vec)>
[[gnu::always_inline]] inline int64_t forward_lanes(const float* x, float* y, float* t, int64_t n) {
  constexpr int64_t w = sizeof(Vec) / sizeof(float);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    Vec v;
    std::memcpy(&v, x + i, sizeof v);
    const Vec th = Tanh(kBeta * (v + kKappa * (v * v * v)));
    const Vec out = 0.5f * v * (1.0f + th);
    std::memcpy(t + i, &th, sizeof th);
    std::memcpy(y + i, &out, sizeof out);
  }
  return i;
}

template <class Vec>
[[gnu::always_inline]] inline int64_t backward_lanes(const float* g, const float* x, const float* t, float* gx,
                                                     int64_t n) {
  constexpr int64_t w = sizeof(Vec) / sizeof(float);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    Vec v, th, gv;
    std::memcpy(&v, x + i, sizeof v);
    std::memcpy(&th, t + i, sizeof th);
    std::memcpy(&gv, g + i, sizeof gv);
    const Vec left_derivative = 0.5f * (1.0f + th);
    const Vec right_derivative = 0.5f * v * (1.0f - th * th) * (kBeta * (1.0f + 3.0f * kKappa * (v * v)));
    const Vec out = gv * (left_derivative + right_derivative);
    std::memcpy(gx + i, &out, sizeof out);
  }
  return i;
}
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx2,fma")
void forward_avx2(const float* x, float* y, float* t, int64_t n) {
  const int64_t i = forward_lanes<__m256, Sleef_tanhf8_u10>(x, y, t, n);
  forward_scalar(x + i, y + i, t + i, n - i);
}
void backward_avx2(const float* g, const float* x, const float* t, float* gx, int64_t n) {
  const int64_t i = backward_lanes<__m256>(g, x, t, gx, n);
  backward_scalar(g + i, x + i, t + i, gx + i, n - i);
}
#pragma GCC pop_options

// 16 wide where the CPU has AVX-512 (ATen's gelu runs its AVX-512 kernel there too).
#pragma GCC push_options
#pragma GCC target("avx512f")
void forward_avx512(const float* x, float* y, float* t, int64_t n) {
  const int64_t i = forward_lanes<__m512, Sleef_tanhf16_u10>(x, y, t, n);
  forward_scalar(x + i, y + i, t + i, n - i);
}
void backward_avx512(const float* g, const float* x, const float* t, float* gx, int64_t n) {
  const int64_t i = backward_lanes<__m512>(g, x, t, gx, n);
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
