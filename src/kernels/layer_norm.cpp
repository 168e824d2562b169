#include "vescale/kernels/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu_simd.h"
#include "vescale/dtensor/sharding_rule.h"

namespace vescale::kernels {
namespace {

// Forward on rows of C values: mean, then the variance around it (two passes: no cancellation),
// y = (x - mean) rstd w + b. Backward, with xh = (x - mean) rstd and g = dy w:
// dx = rstd (g - mean(g) - xh mean(g xh)); dw += dy xh and db += dy over the rows.
struct Row {  // forward's row length and epsilon
  int64_t C;
  float eps;
};

// Vector loops over a GCC vector type (__m256 or __m512), inlined into one wrapper per
// instruction set; the scalar tail finishes each row. Lane sums are added left to right.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
template <class Vec>
[[gnu::always_inline]] inline float lane_sum(Vec v) {
  float s = 0;
  for (size_t i = 0; i < sizeof(Vec) / sizeof(float); ++i) s += v[i];
  return s;
}

template <class Vec>
[[gnu::always_inline]] inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class Vec>
[[gnu::always_inline]] inline void store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}

template <class Vec>
[[gnu::always_inline]] inline void forward_rows(const float* x, const float* w, const float* b,
                                                float* y, float* mean, float* rstd, int64_t rows,
                                                Row r) {
  constexpr int64_t L = sizeof(Vec) / sizeof(float);
  const int64_t C = r.C, CL = C / L * L;
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * C;
    float* yr = y + i * C;
    // Summed around the row's first value, so that a large common offset does not round the mean.
    const float shift = xr[0];
    Vec acc = Vec{} + 0.0f;
    for (int64_t j = 0; j < CL; j += L) acc += load<Vec>(xr + j) - shift;
    float s = lane_sum(acc);
    for (int64_t j = CL; j < C; ++j) s += xr[j] - shift;
    const float m = shift + s / static_cast<float>(C);
    Vec acc2 = Vec{} + 0.0f;
    for (int64_t j = 0; j < CL; j += L) {
      const Vec d = load<Vec>(xr + j) - m;
      acc2 += d * d;
    }
    float s2 = lane_sum(acc2);
    for (int64_t j = CL; j < C; ++j) s2 += (xr[j] - m) * (xr[j] - m);
    const float rs = 1.0f / std::sqrt(s2 / static_cast<float>(C) + r.eps);
    for (int64_t j = 0; j < CL; j += L)
      store<Vec>(yr + j, (load<Vec>(xr + j) - m) * rs * load<Vec>(w + j) + load<Vec>(b + j));
    for (int64_t j = CL; j < C; ++j) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    mean[i] = m;
    rstd[i] = rs;
  }
}

template <class Vec>
[[gnu::always_inline]] inline void backward_rows(const float* dy, const float* x, const float* w,
                                                 const float* mean, const float* rstd, float* dx,
                                                 float* dw, float* db, int64_t rows, int64_t C) {
  constexpr int64_t L = sizeof(Vec) / sizeof(float);
  const int64_t CL = C / L * L;
  for (int64_t i = 0; i < rows; ++i) {
    const float *dyr = dy + i * C, *xr = x + i * C;
    float* dxr = dx + i * C;
    const float m = mean[i], rs = rstd[i];
    Vec sg = Vec{} + 0.0f, sgx = Vec{} + 0.0f;
    for (int64_t j = 0; j < CL; j += L) {
      const Vec d = load<Vec>(dyr + j), xh = (load<Vec>(xr + j) - m) * rs, g = d * load<Vec>(w + j);
      sg += g;
      sgx += g * xh;
      store<Vec>(dw + j, load<Vec>(dw + j) + d * xh);
      store<Vec>(db + j, load<Vec>(db + j) + d);
    }
    float a = lane_sum(sg), c = lane_sum(sgx);
    for (int64_t j = CL; j < C; ++j) {
      const float xh = (xr[j] - m) * rs, g = dyr[j] * w[j];
      a += g;
      c += g * xh;
      dw[j] += dyr[j] * xh;
      db[j] += dyr[j];
    }
    a /= static_cast<float>(C);
    c /= static_cast<float>(C);
    for (int64_t j = 0; j < CL; j += L) {
      const Vec xh = (load<Vec>(xr + j) - m) * rs, g = load<Vec>(dyr + j) * load<Vec>(w + j);
      store<Vec>(dxr + j, rs * (g - a - xh * c));
    }
    for (int64_t j = CL; j < C; ++j) {
      const float xh = (xr[j] - m) * rs, g = dyr[j] * w[j];
      dxr[j] = rs * (g - a - xh * c);
    }
  }
}
#pragma GCC diagnostic pop

typedef float Scalar1 __attribute__((vector_size(4)));  // one lane: the scalar level

void forward_scalar(const float* x, const float* w, const float* b, float* y, float* mean,
                    float* rstd, int64_t rows, Row r) {
  forward_rows<Scalar1>(x, w, b, y, mean, rstd, rows, r);
}
void backward_scalar(const float* dy, const float* x, const float* w, const float* mean,
                     const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t C) {
  backward_rows<Scalar1>(dy, x, w, mean, rstd, dx, dw, db, rows, C);
}

#ifdef KERNELS_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
void forward_avx2(const float* x, const float* w, const float* b, float* y, float* mean,
                  float* rstd, int64_t rows, Row r) {
  forward_rows<__m256>(x, w, b, y, mean, rstd, rows, r);
}
void backward_avx2(const float* dy, const float* x, const float* w, const float* mean,
                   const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t C) {
  backward_rows<__m256>(dy, x, w, mean, rstd, dx, dw, db, rows, C);
}
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f")
void forward_avx512(const float* x, const float* w, const float* b, float* y, float* mean,
                    float* rstd, int64_t rows, Row r) {
  forward_rows<__m512>(x, w, b, y, mean, rstd, rows, r);
}
void backward_avx512(const float* dy, const float* x, const float* w, const float* mean,
                     const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t C) {
  backward_rows<__m512>(dy, x, w, mean, rstd, dx, dw, db, rows, C);
}
#pragma GCC pop_options
#endif

void forward_cpu(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                 int64_t rows, Row r) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() == SimdLevel::avx512) return forward_avx512(x, w, b, y, mean, rstd, rows, r);
  if (simd_level() == SimdLevel::avx2) return forward_avx2(x, w, b, y, mean, rstd, rows, r);
#endif
  forward_scalar(x, w, b, y, mean, rstd, rows, r);
}

void backward_cpu(const float* dy, const float* x, const float* w, const float* mean,
                  const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t C) {
#ifdef KERNELS_X86_SIMD
  if (simd_level() == SimdLevel::avx512)
    return backward_avx512(dy, x, w, mean, rstd, dx, dw, db, rows, C);
  if (simd_level() == SimdLevel::avx2)
    return backward_avx2(dy, x, w, mean, rstd, dx, dw, db, rows, C);
#endif
  backward_scalar(dy, x, w, mean, rstd, dx, dw, db, rows, C);
}

// Rows per parallel chunk. Each chunk sums its own dw and db; the chunks' sums are added in
// chunk order, so the result does not depend on the thread count.
constexpr int64_t kRowsPerChunk = 64;

// mean and rstd have x's leading shape (one per row), so that a DTensor's row shards cover them.
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_forward_cpu(const at::Tensor& input,
                                                                      const at::Tensor& weight,
                                                                      const at::Tensor& bias,
                                                                      double eps) {
  const at::Tensor x = input.contiguous(), w = weight.contiguous(), b = bias.contiguous();
  const int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  const auto lead = x.sizes().slice(0, x.dim() - 1);
  at::Tensor y = at::empty_like(x), mean = at::empty(lead, x.options()),
             rstd = at::empty(lead, x.options());
  if (rows == 0) return {y, mean, rstd};
  const Row r{C, static_cast<float>(eps)};
  const float *xp = x.const_data_ptr<float>(), *wp = w.const_data_ptr<float>(),
              *bp = b.const_data_ptr<float>();
  float *yp = y.mutable_data_ptr<float>(), *mp = mean.mutable_data_ptr<float>(),
        *rp = rstd.mutable_data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
    forward_cpu(xp + begin * C, wp, bp, yp + begin * C, mp + begin, rp + begin, end - begin, r);
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward_cpu(const at::Tensor& grad,
                                                                       const at::Tensor& input,
                                                                       const at::Tensor& weight,
                                                                       const at::Tensor& mean_in,
                                                                       const at::Tensor& rstd_in) {
  const at::Tensor x = input.contiguous(), w = weight.contiguous(), dy = grad.contiguous();
  const at::Tensor mean = mean_in.contiguous(), rstd = rstd_in.contiguous();
  const int64_t C = x.size(-1), rows = C ? x.numel() / C : 0;
  const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  at::Tensor dx = at::empty_like(x);
  at::Tensor partial = at::zeros({chunks, 2, C}, x.options());  // per chunk: dw, db
  const float *dyp = dy.const_data_ptr<float>(), *xp = x.const_data_ptr<float>(),
              *wp = w.const_data_ptr<float>(), *mp = mean.const_data_ptr<float>(),
              *rp = rstd.const_data_ptr<float>();
  float *dxp = dx.mutable_data_ptr<float>(), *pp = partial.mutable_data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t r0 = k * kRowsPerChunk, n = std::min(kRowsPerChunk, rows - r0);
      backward_cpu(dyp + r0 * C, xp + r0 * C, wp, mp + r0, rp + r0, dxp + r0 * C, pp + k * 2 * C,
                   pp + k * 2 * C + C, n, C);
    }
  });
  const at::Tensor sums = partial.sum(0);  // [2, C]
  return {dx, sums[0].clone(), sums[1].clone()};
}

// Through the dispatcher, so that DTensors reach their rules.
struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& bias, double eps) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::layer_norm_forward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&, double)>();
    auto [y, mean, rstd] = op.call(x, weight, bias, eps);
    ctx->save_for_backward({x, weight, mean, rstd});
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("vescale::layer_norm_backward", "")
                         .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                             const at::Tensor&, const at::Tensor&, const at::Tensor&,
                             const at::Tensor&, const at::Tensor&)>();
    const auto s = ctx->get_saved_variables();
    auto [dx, dw, db] = op.call(grads[0], s[0], s[1], s[2], s[3]);
    return {dx, dw, db, at::Tensor()};
  }
};

bool use_kernel(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  for (const at::Tensor* t : {&x, &w, &b})
    if (!t->defined() || !kernel_input(*t)) return false;
  return x.dim() >= 1 && w.dim() == 1 && b.dim() == 1 && x.size(-1) == w.size(0) &&
         b.size(0) == w.size(0) && x.numel() > 0;
}

at::Tensor layer_norm_composite(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, double eps) {
  if (!use_kernel(x, weight, bias)) return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  return LayerNormFunction::apply(x, weight, bias, eps);
}

// DTensor rules: rows are independent, so shards of the leading dims stay (a sequence-parallel
// run normalizes its own tokens); the weight and bias are whole, and their gradients are Partial
// sums over the sharded rows.
dtensor::Strategy forward_rule(const dtensor::OpCall& call) {
  const auto& x = call.specs[0];
  const auto p = dtensor::shards_below(x, x.ndim() - 1);
  const std::vector<int64_t> lead(x.shape.begin(), x.shape.end() - 1);
  dtensor::Strategy st;
  st.inputs.assign(call.specs.size(), dtensor::replicate_all(call.mesh_ndim()));
  st.inputs[0] = p;
  st.outputs = {p, p, p};
  st.output_shapes = {x.shape, lead, lead};
  return st;
}

// (grad, x, weight, mean, rstd) -> (dx, dw, db)
dtensor::Strategy backward_rule(const dtensor::OpCall& call) {
  const auto& x = call.specs[1];
  const auto p = dtensor::shards_below(x, x.ndim() - 1);
  const auto sums = dtensor::partial_where_sharded(p);
  const std::vector<int64_t> c{x.shape.back()};
  dtensor::Strategy st;
  st.inputs = {p, p, dtensor::replicate_all(call.mesh_ndim()), p, p};
  st.outputs = {p, sums, sums};
  st.output_shapes = {x.shape, c, c};
  return st;
}

struct RuleRegistrar {
  RuleRegistrar() {
    dtensor::register_rule("vescale::layer_norm_forward", forward_rule);
    dtensor::register_rule("vescale::layer_norm_backward", backward_rule);
  }
};
const RuleRegistrar rule_registrar;

}  // namespace

TORCH_LIBRARY_FRAGMENT(vescale, m) {
  m.def("layer_norm(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor");
  m.def(
      "layer_norm_forward(Tensor x, Tensor weight, Tensor bias, float eps) -> "
      "(Tensor, Tensor, Tensor)");
  m.def(
      "layer_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> "
      "(Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(vescale, CompositeImplicitAutograd, m) {
  m.impl("layer_norm", TORCH_FN(layer_norm_composite));
}

TORCH_LIBRARY_IMPL(vescale, CPU, m) {
  m.impl("layer_norm_forward", TORCH_FN(layer_norm_forward_cpu));
  m.impl("layer_norm_backward", TORCH_FN(layer_norm_backward_cpu));
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      double eps) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("vescale::layer_norm", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, bias, eps);
}

}  // namespace vescale::kernels
