// The vectorised CPU kernel (16 Philox blocks at a time, SIMD distribution loops) against the
// plain formula: philox.h's element_value() called element by element, then cast to the dtype.
// Bitwise, for every distribution, on regions whose rows start and end mid-block.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

#include "random/fill_regions.h"
#include "vescale/random/philox.h"
#include "vescale/random/random.h"

using namespace vescale::random;

extern void vescale_test_fill_region(at::Tensor&, const std::vector<int64_t>&,
                                     const std::vector<int64_t>&, uint64_t, uint64_t,
                                     const DistParams&);

namespace {

// The reference: each local element's global row-major index, its value from element_value().
at::Tensor reference(const std::vector<int64_t>& global, const std::vector<int64_t>& local,
                     const std::vector<int64_t>& offset, uint64_t seed, uint64_t base,
                     const DistParams& p, at::ScalarType dtype) {
  at::Tensor ref = at::empty(local, at::kDouble);
  double* r = ref.data_ptr<double>();
  const int64_t nd = static_cast<int64_t>(local.size());
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    int64_t g = 0;
    for (int64_t d = 0; d < nd; ++d) g = g * global[d] + offset[d] + idx[d];
    r[i] = element_value(seed, base, static_cast<uint64_t>(g), p);
    for (int64_t d = nd - 1; d >= 0 && ++idx[d] == local[d]; --d) idx[d] = 0;
  }
  return ref.to(
      dtype);  // the kernel casts the same double (static_cast, or torch's copy_ for other dtypes)
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

}  // namespace

TEST_CASE("the vectorised CPU kernel equals the per-element formula bit for bit", "[random]") {
  const std::vector<DistParams> dists = {
      {Dist::Uniform, -3.0, 5.0},
      {Dist::Normal, 1.5, 0.3},
      {Dist::Bernoulli, 0.3, 0.0},
      {Dist::RandInt, -7.0, 1000.0},
      {Dist::TruncNormal, 0.0, 1.0, 0.02275013194817921, 0.9772498680518208, -2.0, 2.0},
  };
  const auto& regions = vescale::testing::fill_regions();
  for (const auto& p : dists)
    for (const auto& r : regions)
      for (uint64_t base : {uint64_t{0}, uint64_t{3}, (uint64_t{1} << 33) + 1})
        for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
          const uint64_t seed = 0x9e3779b97f4a7c15ull;
          at::Tensor out = at::empty(r.local, dtype);
          vescale_test_fill_region(out, r.global, r.offset, seed, base, p);
          INFO("dist " << static_cast<int>(p.dist) << " local " << c10::IntArrayRef(r.local)
                       << " offset " << c10::IntArrayRef(r.offset) << " base " << base << " dtype "
                       << dtype);
          CHECK(same_bits(out, reference(r.global, r.local, r.offset, seed, base, p, dtype)));
        }
}

TEST_CASE("dropout and the public fills use the same per-element formula", "[random]") {
  const int64_t n = 4096 * 3 + 7;
  manual_seed(99);
  const State s0 = get_state();
  at::Tensor x = at::randn({n}, at::kFloat);
  at::Tensor y = dropout(x, 0.25);
  // dropout draws keep ~ Bernoulli(0.75) at (seed, offset), then x * keep * (1 / 0.75)
  at::Tensor keep = at::empty({n}, at::kFloat);
  for (int64_t i = 0; i < n; ++i)
    keep[i] = static_cast<float>(
        element_value(s0.seed, s0.offset, i, DistParams{Dist::Bernoulli, 0.75, 0.0}));
  CHECK(same_bits(y, x * keep * (1.0 / 0.75)));
  CHECK(get_state().offset == s0.offset + (n + 3) / 4);

  at::Tensor z = at::empty({n}, at::kFloat);
  const State s1 = get_state();
  normal_(z, 0.5, 2.0);
  CHECK(same_bits(z, reference({n}, {n}, {0}, s1.seed, s1.offset,
                               DistParams{Dist::Normal, 0.5, 2.0}, at::kFloat)));
}
