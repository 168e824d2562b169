// Block attention (kernels/block_attention.h), the unit of context parallelism: a sequence's
// queries and keys cut into chunks as ring attention cuts them (plain, or zigzag: rank r of cp
// holds chunks r and 2cp-1-r), each query chunk attended to every key chunk and merged, against
// full attention on one device in double precision: outputs, and dq, dk, dv summed over blocks
// against autograd.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include "common/attention_reference.h"

#include <cmath>
#include <vector>

#include "vescale/kernels/block_attention.h"

using namespace vescale::kernels;
using vescale::testing::full_attention;

namespace {

constexpr int64_t B = 2, H = 4, T = 16, D = 8;

// Each rank's global positions: cp equal chunks, or 2cp chunks zigzagged.
std::vector<at::Tensor> chunk_positions(int64_t cp, bool zigzag) {
  std::vector<at::Tensor> out;
  for (int64_t r = 0; r < cp; ++r) {
    if (!zigzag) {
      out.push_back(at::arange(r * T / cp, (r + 1) * T / cp, at::kLong));
      continue;
    }
    const int64_t c = T / (2 * cp);
    out.push_back(at::cat({at::arange(r * c, (r + 1) * c, at::kLong),
                           at::arange((2 * cp - 1 - r) * c, (2 * cp - r) * c, at::kLong)}));
  }
  return out;
}

at::Tensor rows(const at::Tensor& t, const at::Tensor& pos) { return t.index_select(2, pos); }

}  // namespace

TEST_CASE("query chunks attended to every key chunk and merged equal full attention, with grads",
          "[kernels][context]") {
  for (bool causal : {true, false})
    for (bool zigzag : {false, true})
      for (int64_t cp : {2, 4})
        for (int64_t kv_heads : {H, H / 2}) {
          CAPTURE(causal, zigzag, cp, kv_heads);
          at::manual_seed(7);
          auto q = at::randn({B, H, T, D}, at::kDouble).requires_grad_(true);
          auto k = at::randn({B, kv_heads, T, D}, at::kDouble).requires_grad_(true);
          auto v = at::randn({B, kv_heads, T, D}, at::kDouble).requires_grad_(true);
          const auto ref = full_attention(q, k, v, causal);
          const auto dout = at::randn_like(ref);
          ref.backward(dout);
          const auto pos = chunk_positions(cp, zigzag);
          auto f32 = [](const at::Tensor& t) { return t.detach().to(at::kFloat); };
          at::Tensor dk = at::zeros({B, kv_heads, T, D}), dv = at::zeros({B, kv_heads, T, D});
          for (int64_t r = 0; r < cp; ++r) {
            const auto qr = rows(f32(q), pos[r]);
            AttentionBlock acc;
            // In ring order: this rank's keys first, then each predecessor's.
            for (int64_t s = 0; s < cp; ++s) {
              const auto& kp = pos[(r - s + cp) % cp];
              if (block_fully_masked(pos[r], kp, causal)) continue;
              merge_blocks(
                  acc, block_attention(qr, rows(f32(k), kp), rows(f32(v), kp), pos[r], kp, causal));
            }
            REQUIRE(acc.out.defined());
            CHECK(at::allclose(acc.out, rows(ref.detach(), pos[r]).to(at::kFloat), 1e-5, 1e-5));
            at::Tensor dq = at::zeros_like(qr);
            const auto dr = rows(dout, pos[r]).to(at::kFloat);
            for (int64_t s = 0; s < cp; ++s) {
              const auto& kp = pos[s];
              if (block_fully_masked(pos[r], kp, causal)) continue;
              const auto g = block_attention_backward(qr, rows(f32(k), kp), rows(f32(v), kp),
                                                      pos[r], kp, causal, acc.out, acc.lse, dr);
              dq += g.dq;
              dk.index_add_(2, kp, g.dk);
              dv.index_add_(2, kp, g.dv);
            }
            CHECK(at::allclose(dq, rows(q.grad(), pos[r]).to(at::kFloat), 1e-5, 1e-5));
          }
          CHECK(at::allclose(dk, k.grad().to(at::kFloat), 1e-5, 1e-5));
          CHECK(at::allclose(dv, v.grad().to(at::kFloat), 1e-5, 1e-5));
        }
}

TEST_CASE("a causal block whose keys all follow its queries is skipped, and merges as nothing",
          "[kernels][context]") {
  const auto early = at::arange(0, 4, at::kLong), late = at::arange(4, 8, at::kLong);
  CHECK(block_fully_masked(early, late, true));
  CHECK_FALSE(block_fully_masked(late, early, true));
  CHECK_FALSE(block_fully_masked(early, late, false));
  // Computed anyway, every row sees no key: log-sum-exp -inf, output 0, and merging it into a
  // real block leaves that block's values.
  at::manual_seed(3);
  auto q = at::randn({1, 2, 4, D}), k = at::randn({1, 2, 4, D}), v = at::randn({1, 2, 4, D});
  const auto masked = block_attention(q, k, v, early, late, true);
  CHECK(at::all(at::isinf(masked.lse)).item<bool>());
  CHECK(at::all(masked.out == 0).item<bool>());
  AttentionBlock acc = block_attention(q, k, v, early, early, true);
  const auto before = acc.out.clone();
  merge_blocks(acc, masked);
  CHECK(at::equal(acc.out, before));
}
