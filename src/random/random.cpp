#include "vescale/random/random.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <mutex>

#include "random/kernels.h"
#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::random {

namespace {
std::mutex g_mutex;
State g_state;
}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = State{seed, 0};
}

State get_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

void set_state(const State& s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = s;
}

std::pair<uint64_t, uint64_t> reserve(int64_t global_numel) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const uint64_t base = g_state.offset;
  g_state.offset += (static_cast<uint64_t>(global_numel) + 3) / 4;
  return {g_state.seed, base};
}

void fill_region(at::Tensor& out, const std::vector<int64_t>& global_shape,
                 const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                 const DistParams& p) {
  // A meta tensor (a pipeline stage's copy of another stage's parameter) has no values: the
  // offset has advanced as for any fill, so the real fills after it stay where they belong.
  if (out.is_meta()) return;
  at::Tensor target = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  if (target.is_cuda())
    fill_region_cuda(target, global_shape, offset, seed, base, p);
  else
    fill_region_cpu(target, global_shape, offset, seed, base, p);
  if (!target.is_same(out)) out.copy_(target);
}

namespace {

// A plain tensor is its own global tensor.
at::Tensor& fill_plain(at::Tensor& t, const DistParams& p) {
  auto [seed, base] = reserve(t.numel());
  fill_region(t, t.sizes().vec(), std::vector<int64_t>(t.dim(), 0), seed, base, p);
  return t;
}

// A DTensor without an aten op for its distribution: each rank fills its shard directly.
at::Tensor& fill_dtensor(at::Tensor& t, const DistParams& p) {
  const auto& spec = dtensor::spec_of(t);
  VESCALE_CHECK(!spec.has_partial(),
                "random: cannot fill a Partial DTensor; redistribute it first");
  auto [seed, base] = reserve(t.numel());
  at::Tensor local;
  {
    c10::NoGradGuard no_grad;  // the shard itself (to_local shares its storage), no graph
    local = dtensor::to_local(t);
  }
  fill_region(local, spec.shape, spec.local_offset(), seed, base, p);
  return t;
}

}  // namespace

at::Tensor& trunc_normal_(at::Tensor& t, double mean, double std, double a, double b) {
  VESCALE_CHECK(std > 0 && a < b, "random::trunc_normal_: need std > 0 and a < b, got std ", std,
                ", [", a, ", ", b, "]");
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  DistParams p{Dist::TruncNormal, mean, std, cdf((a - mean) / std), cdf((b - mean) / std), a, b};
  return dtensor::is_dtensor(t) ? fill_dtensor(t, p) : fill_plain(t, p);
}

// DTensors take the aten op, whose rule (random/dtensor_rules.cpp) fills each shard.
at::Tensor& uniform_(at::Tensor& t, double from, double to) {
  VESCALE_CHECK(from <= to, "random::uniform_: from (", from, ") must not exceed to (", to, ")");
  if (dtensor::is_dtensor(t)) return t.uniform_(from, to);
  return fill_plain(t, {Dist::Uniform, from, to});
}

at::Tensor& normal_(at::Tensor& t, double mean, double std) {
  VESCALE_CHECK(std >= 0, "random::normal_: std (", std, ") must be >= 0");
  if (dtensor::is_dtensor(t)) return t.normal_(mean, std);
  return fill_plain(t, {Dist::Normal, mean, std});
}

at::Tensor& bernoulli_(at::Tensor& t, double p) {
  VESCALE_CHECK(p >= 0 && p <= 1, "random::bernoulli_: p (", p, ") must be in [0, 1]");
  if (dtensor::is_dtensor(t)) return t.bernoulli_(p);
  return fill_plain(t, {Dist::Bernoulli, p, 0});
}

at::Tensor& randint_(at::Tensor& t, int64_t low, int64_t high) {
  VESCALE_CHECK(low < high && high - low <= (int64_t{1} << 32),
                "random::randint_: need low < high and a range of at "
                "most 2^32, got [",
                low, ", ", high, ")");
  if (dtensor::is_dtensor(t)) return t.random_(low, high);
  return fill_plain(t, {Dist::RandInt, static_cast<double>(low), static_cast<double>(high)});
}

at::Tensor dropout(const at::Tensor& x, double p, bool train) {
  VESCALE_CHECK(p >= 0 && p < 1, "random::dropout: p (", p, ") must be in [0, 1)");
  if (!train || p == 0) return x;
  at::Tensor keep = at::empty_like(x);
  bernoulli_(keep, 1.0 - p);
  return x * keep * (1.0 / (1.0 - p));
}

namespace {
std::pair<double, double> fans(const at::Tensor& w) {
  VESCALE_CHECK(w.dim() >= 2, "random: fan in/out need at least 2 dims, got ", w.sizes());
  double receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= static_cast<double>(w.size(d));
  return {static_cast<double>(w.size(1)) * receptive, static_cast<double>(w.size(0)) * receptive};
}
}  // namespace

at::Tensor& kaiming_uniform_(at::Tensor& w, double a) {
  // torch.nn.init.kaiming_uniform_(w, a, fan_in, leaky_relu): bound = gain * sqrt(3 / fan_in)
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / fans(w).first);
  return uniform_(w, -bound, bound);
}

at::Tensor& xavier_uniform_(at::Tensor& w, double gain) {
  auto [fan_in, fan_out] = fans(w);
  const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
  return uniform_(w, -bound, bound);
}

}  // namespace vescale::random
