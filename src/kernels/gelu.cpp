#include "vescale/kernels/gelu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu_simd.h"
#include "vescale/dtensor/sharding_rule.h"

namespace vescale::kernels {
namespace {

constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// GELU(tanh) as x * sigmoid(2u), u = k (x + kappa x^3): 0.5 (1 + tanh(u)) = sigmoid(2u) exactly,
// and exp plus a division costs a quarter of SLEEF's tanh (double-float inside). Forward keeps
// nothing but x; backward evaluates the exp again, which is cheaper than storing and reloading a
// second activation of the same size.
void forward_scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v / (1.0f + std::exp((-2.0f * kBeta) * (v + kKappa * (v * v * v))));
  }
}

// d y / d x = s + x s (1 - s) 2k (1 + 3 kappa x^2) with s = sigmoid(2u) = 1 / (1 + e), e =
// exp(-2u), times the incoming gradient. 1 - s is taken as e s, not subtracted, which would lose
// the digits of 1 - s where s is near 1; the exponent is capped below float's overflow so that e s
// stays finite.
constexpr float kMaxExponent = 88.0f;

void backward_scalar(const float* g, const float* x, float* gx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = std::exp(std::min((-2.0f * kBeta) * (v + kKappa * (v * v * v)), kMaxExponent));
    const float s = 1.0f / (1.0f + e);
    gx[i] = g[i] * (s + v * (s * (e * s)) * ((2.0f * kBeta) * (1.0f + (3.0f * kKappa) * (v * v))));
  }
}

#ifdef KERNELS_X86_SIMD
// The vector loops, written once over a GCC vector type (__m256 or __m512, whose operators are
// the packed instructions) and inlined into one wrapper per instruction set, which compiles them
// for its width. Same operations in the same order as the scalar loops. Return the elements done.
// (-Wpsabi: GCC notes the vector ABI of these templates, which are only ever inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <class Vec, Vec (*Exp)(Vec)>
[[gnu::always_inline]] inline int64_t forward_lanes(const float* x, float* y, int64_t n) {
  constexpr int64_t w = sizeof(Vec) / sizeof(float);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    Vec v;
    std::memcpy(&v, x + i, sizeof v);
    const Vec out = v / (1.0f + Exp((-2.0f * kBeta) * (v + kKappa * (v * v * v))));
    std::memcpy(y + i, &out, sizeof out);
  }
  return i;
}

template <class Vec, Vec (*Exp)(Vec)>
[[gnu::always_inline]] inline int64_t backward_lanes(const float* g, const float* x, float* gx,
                                                     int64_t n) {
  constexpr int64_t w = sizeof(Vec) / sizeof(float);
  int64_t i = 0;
  for (; i + w <= n; i += w) {
    Vec v, gv;
    std::memcpy(&v, x + i, sizeof v);
    std::memcpy(&gv, g + i, sizeof gv);
    const Vec z = (-2.0f * kBeta) * (v + kKappa * (v * v * v));
    const Vec e = Exp(z < kMaxExponent ? z : kMaxExponent);
    const Vec s = 1.0f / (1.0f + e);
    const Vec out =
        gv * (s + v * (s * (e * s)) * ((2.0f * kBeta) * (1.0f + (3.0f * kKappa) * (v * v))));
    std::memcpy(gx + i, &out, sizeof out);
  }
  return i;
}
#pragma GCC diagnostic pop

#pragma GCC push_options
#pragma GCC target("avx2,fma")
void forward_avx2(const float* x, float* y, int64_t n) {
  const int64_t i = forward_lanes<__m256, Sleef_expf8_u10>(x, y, n);
  forward_scalar(x + i, y + i, n - i);
}
void backward_avx2(const float* g, const float* x, float* gx, int64_t n) {
  const int64_t i = backward_lanes<__m256, Sleef_expf8_u10>(g, x, gx, n);
  backward_scalar(g + i, x + i, gx + i, n - i);
}
#pragma GCC pop_options

// 16 wide where the CPU has AVX-512 (ATen's gelu runs its AVX-512 kernel there too).
#pragma GCC push_options
#pragma GCC target("avx512f")
void forward_avx512(const float* x, float* y, int64_t n) {
  const int64_t i = forward_lanes<__m512, Sleef_expf16_u10>(x, y, n);
  forward_scalar(x + i, y + i, n - i);
}
void backward_avx512(const float* g, const float* x, float* gx, int64_t n) {
  const int64_t i = backward_lanes<__m512, Sleef_expf16_u10>(g, x, gx, n);
  backward_scalar(g + i, x + i, gx + i, n - i);
}
#pragma GCC pop_options
#endif

void forward_cpu(const float* x, float* y, int64_t n) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() == SimdLevel::avx512) return forward_avx512(x, y, n);
  if (simd_level() == SimdLevel::avx2) return forward_avx2(x, y, n);
#endif
  forward_scalar(x, y, n);
}

void backward_cpu(const float* g, const float* x, float* gx, int64_t n) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() == SimdLevel::avx512) return backward_avx512(g, x, gx, n);
  if (simd_level() == SimdLevel::avx2) return backward_avx2(g, x, gx, n);
#endif
  backward_scalar(g, x, gx, n);
}

constexpr int64_t kGrain = 32768;

at::Tensor gelu_forward_cpu(const at::Tensor& input) {
  const at::Tensor x = input.contiguous();
  at::Tensor y = at::empty_like(x);
  const float* xp = x.const_data_ptr<float>();
  float* yp = y.mutable_data_ptr<float>();
  at::parallel_for(0, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    forward_cpu(xp + begin, yp + begin, end - begin);
  });
  return y;
}

at::Tensor gelu_backward_cpu(const at::Tensor& grad, const at::Tensor& input) {
  const at::Tensor g = grad.contiguous(), x = input.contiguous();
  at::Tensor gx = at::empty_like(x);
  const float *gp = g.const_data_ptr<float>(), *xp = x.const_data_ptr<float>();
  float* out = gx.mutable_data_ptr<float>();
  at::parallel_for(0, gx.numel(), kGrain, [&](int64_t begin, int64_t end) {
    backward_cpu(gp + begin, xp + begin, out + begin, end - begin);
  });
  return gx;
}

// Through the dispatcher, so that a DTensor reaches its rule.
struct GeluTanhFunction : torch::autograd::Function<GeluTanhFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::gelu_tanh_forward", "")
                         .typed<at::Tensor(const at::Tensor&)>();
    ctx->save_for_backward({x});
    return op.call(x);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::gelu_tanh_backward", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return {op.call(grads[0], ctx->get_saved_variables()[0])};
  }
};

// With or without grad: a forward's value must not depend on the grad mode (activation
// checkpointing runs forward without grad and again with it).
at::Tensor gelu_tanh_composite(const at::Tensor& x) {
  if (!kernel_input(x)) return at::gelu(x, "tanh");
  return GeluTanhFunction::apply(x);
}

// DTensor rules: elementwise, so every shard stays; a Partial sum is reduced first (GELU is not
// linear).
dtensor::Strategy forward_rule(const dtensor::OpCall& call) {
  const auto& x = call.specs[0];
  const auto p = dtensor::shards_below(x, x.ndim());
  dtensor::Strategy st;
  st.inputs = {p};
  st.outputs = {p};
  st.output_shapes = {x.shape};
  return st;
}

// (grad, x) -> grad_x, in x's placements.
dtensor::Strategy backward_rule(const dtensor::OpCall& call) {
  const auto& x = call.specs[1];
  const auto p = dtensor::shards_below(x, x.ndim());
  dtensor::Strategy st;
  st.inputs = {p, p};
  st.outputs = {p};
  st.output_shapes = {x.shape};
  return st;
}

struct RuleRegistrar {
  RuleRegistrar() {
    dtensor::register_rule("vescale::gelu_tanh_forward", forward_rule);
    dtensor::register_rule("vescale::gelu_tanh_backward", backward_rule);
  }
};
const RuleRegistrar rule_registrar;

}  // namespace

TORCH_LIBRARY_FRAGMENT(vescale, m) {
  m.def("gelu_tanh(Tensor x) -> Tensor");
  m.def("gelu_tanh_forward(Tensor x) -> Tensor");
  m.def("gelu_tanh_backward(Tensor grad, Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(vescale, CompositeImplicitAutograd, m) {
  m.impl("gelu_tanh", TORCH_FN(gelu_tanh_composite));
}

TORCH_LIBRARY_IMPL(vescale, CPU, m) {
  m.impl("gelu_tanh_forward", TORCH_FN(gelu_forward_cpu));
  m.impl("gelu_tanh_backward", TORCH_FN(gelu_backward_cpu));
}

at::Tensor gelu_tanh(const at::Tensor& x) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("vescale::gelu_tanh", "")
                       .typed<at::Tensor(const at::Tensor&)>();
  return op.call(x);
}

}  // namespace vescale::kernels
