// Philox against the published Random123 known answers, our elementary functions against
// libm, the region property (a region of the stream equals that slice of the whole), and
// statistical sanity of each distribution.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>

#include "vescale/random/philox.h"
#include "vescale/random/random.h"

using namespace vescale::random;

TEST_CASE("Philox4x32-10 matches the Random123 known-answer tests", "[random]") {
  struct Kat {
    Philox4 ctr;
    uint32_t k0, k1;
    Philox4 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const auto& k : kats) {
    auto got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(got.v[i] == k.want.v[i]);
  }
}

TEST_CASE("the deterministic log, sin and cos agree with libm", "[random]") {
  for (double x : {1e-300, 2.3283064365386963e-10, 1e-5, 0.1, 0.5, 0.70710678, 0.9999, 1.0}) {
    INFO("log " << x);
    CHECK(det_log(x) == Approx(std::log(x)).epsilon(1e-14).margin(1e-15));
  }
  for (int i = 0; i < 1000; ++i) {
    const double t = i / 1000.0;
    double s, c;
    det_sincos_turns(t, s, c);
    INFO("t " << t);
    CHECK(s == Approx(std::sin(2 * M_PI * t)).margin(1e-14));
    CHECK(c == Approx(std::cos(2 * M_PI * t)).margin(1e-14));
  }
}

TEST_CASE("any region of the stream equals that slice of the whole tensor", "[random]") {
  for (auto shape : {std::vector<int64_t>{8, 6}, {7, 5}, {3, 4, 5}, {13}}) {
    for (int dist = 0; dist < 4; ++dist) {
      manual_seed(1234);
      DistParams p{static_cast<Dist>(dist), dist == 3 ? -3.0 : 0.25, dist == 3 ? 11.0 : 2.0};
      if (p.dist == Dist::Bernoulli) p.a = 0.3;
      at::Tensor whole = at::empty(shape, at::kFloat);
      // fill the whole tensor, then rebuild it from uneven blocks drawn separately
      auto state = get_state();
      auto [seed, base] = std::make_pair(state.seed, state.offset);
      const DistParams params = p;
      auto fill = [&](at::Tensor& out, std::vector<int64_t> off) {
        extern void vescale_test_fill_region(at::Tensor&, const std::vector<int64_t>&,
                                             const std::vector<int64_t>&, uint64_t, uint64_t,
                                             const DistParams&);
        vescale_test_fill_region(out, shape, off, seed, base, params);
      };
      fill(whole, std::vector<int64_t>(shape.size(), 0));
      at::Tensor rebuilt = at::empty(shape, at::kFloat);
      const int64_t cut = (shape[0] + 1) / 3;
      for (int64_t r0 = 0; r0 < shape[0]; r0 += cut) {
        const int64_t rows = std::min(cut, shape[0] - r0);
        auto piece_shape = shape;
        piece_shape[0] = rows;
        at::Tensor piece = at::empty(piece_shape, at::kFloat);
        std::vector<int64_t> off(shape.size(), 0);
        off[0] = r0;
        fill(piece, off);
        rebuilt.narrow(0, r0, rows).copy_(piece);
      }
      INFO("dist " << dist << " shape " << c10::IntArrayRef(shape));
      CHECK(at::equal(whole, rebuilt));
    }
  }
}

TEST_CASE("seeds, offsets and saved states", "[random]") {
  manual_seed(7);
  at::Tensor a = at::empty({100});
  normal_(a);
  auto after_a = get_state();
  CHECK(after_a.offset == 25);  // ceil(100 / 4) blocks
  at::Tensor b = at::empty({100});
  normal_(b);
  CHECK(!at::equal(a, b));  // the stream moved on
  set_state(after_a);
  at::Tensor b2 = at::empty({100});
  normal_(b2);
  CHECK(at::equal(b, b2));  // a restored state replays bitwise
  manual_seed(7);
  at::Tensor a2 = at::empty({100});
  normal_(a2);
  CHECK(at::equal(a, a2));
  manual_seed(8);
  normal_(a2);
  CHECK(!at::equal(a, a2));
}

TEST_CASE("distributions have the right moments", "[random]") {
  manual_seed(2026);
  const int64_t n = 200000;
  at::Tensor u = at::empty({n});
  uniform_(u, -1.0, 3.0);
  CHECK(u.min().item<float>() >= -1.0f);
  CHECK(u.max().item<float>() < 3.0f);
  CHECK(u.mean().item<double>() == Approx(1.0).margin(0.02));
  CHECK(u.var().item<double>() == Approx(16.0 / 12.0).epsilon(0.02));
  // chi-square over 20 equal bins: 19 degrees of freedom, 99.9th percentile 43.8
  at::Tensor bins = ((u + 1.0) / 4.0 * 20).floor().to(at::kLong).bincount({}, 20).to(at::kDouble);
  const double expected = n / 20.0;
  const double chi2 = ((bins - expected).pow(2) / expected).sum().item<double>();
  CHECK(chi2 < 43.8);

  at::Tensor z = at::empty({n}, at::kDouble);
  normal_(z, 2.0, 0.5);
  CHECK(z.mean().item<double>() == Approx(2.0).margin(0.01));
  CHECK(z.std().item<double>() == Approx(0.5).epsilon(0.01));
  // tails: P(|z - mean| > 2 std) = 4.55%
  CHECK(((z - 2.0).abs() > 1.0).to(at::kDouble).mean().item<double>() ==
        Approx(0.0455).margin(0.003));

  at::Tensor bern = at::empty({n});
  bernoulli_(bern, 0.3);
  CHECK(bern.mean().item<double>() == Approx(0.3).margin(0.005));
  CHECK(at::equal(bern * (1 - bern), at::zeros_like(bern)));

  at::Tensor ints = at::empty({n}, at::kLong);
  randint_(ints, -5, 5);
  CHECK(ints.min().item<int64_t>() == -5);
  CHECK(ints.max().item<int64_t>() == 4);
  CHECK(ints.to(at::kDouble).mean().item<double>() == Approx(-0.5).margin(0.05));
}

TEST_CASE("the normal inverse CDF and the truncated normal", "[random]") {
  for (double p : {1e-9, 1e-4, 0.02, 0.1, 0.3, 0.5, 0.77, 0.98, 0.9999}) {
    const double x = normal_icdf(p);
    INFO("p " << p);
    CHECK(0.5 * std::erfc(-x / std::sqrt(2.0)) ==
          Approx(p).epsilon(1e-7));  // Acklam: |dx/x| < 1.2e-9
  }
  manual_seed(11);
  at::Tensor t = at::empty({100000}, at::kDouble);
  trunc_normal_(t, 1.0, 2.0, -1.0, 2.0);
  CHECK(t.min().item<double>() >= -1.0);
  CHECK(t.max().item<double>() <= 2.0);
  // mean of N(1, 2) truncated to [-1, 2]: mu + sigma (phi(alpha) - phi(beta)) / (Phi(beta) -
  // Phi(alpha))
  auto phi = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double alpha = -1.0, beta = 0.5;
  const double want = 1.0 + 2.0 * (phi(alpha) - phi(beta)) / (Phi(beta) - Phi(alpha));
  CHECK(t.mean().item<double>() == Approx(want).margin(0.01));
}

TEST_CASE("init functions use the fans of the global shape", "[random]") {
  manual_seed(3);
  at::Tensor w = at::empty({64, 256});
  kaiming_uniform_(w);
  const double bound = 1.0 / std::sqrt(256.0);  // a = sqrt(5): bound = 1/sqrt(fan_in), as nn.Linear
  CHECK(w.abs().max().item<double>() <= bound);
  CHECK(w.abs().max().item<double>() > 0.95 * bound);
  xavier_uniform_(w);
  CHECK(w.abs().max().item<double>() <= std::sqrt(6.0 / (64 + 256)));
  at::Tensor v = at::empty({3});
  CHECK_THROWS_WITH(kaiming_uniform_(v), Catch::Matchers::Contains("at least 2 dims"));
}
