// Ring and all-gather attention (parallel/context/ring_attention.h) over the world as the cp group,
// real processes on Gloo: every rank holds its chunk of the sequence (plain, or zigzag), and its
// rows of the output and of dq, dk, dv equal full attention's on one device (double precision, each
// rank computing the reference on the whole sequence from the same seed) within 1e-5.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cmath>

#include "vescale/dist/world.h"
#include "vescale/parallel/context/ring_attention.h"

using namespace vescale;
using vescale::parallel::context::SequenceSplit;

namespace {

at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          bool causal) {
  const int64_t rep = q.size(1) / k.size(1), T = q.size(2);
  auto kr = k.repeat_interleave(rep, 1), vr = v.repeat_interleave(rep, 1);
  auto s = at::matmul(q, kr.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (causal) s = s.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
  return at::matmul(at::softmax(s, -1), vr);
}

enum class Kind { Ring, AllGather };

void check_ring(int64_t seq_len, bool zigzag, bool causal, int64_t kv_heads,
                Kind kind = Kind::Ring) {
  CAPTURE(seq_len, zigzag, causal, kv_heads, kind == Kind::Ring);
  auto& group = dist::world();
  const int64_t cp = group.size(), B = 2, H = 4, D = 8;
  at::manual_seed(11);  // the same whole tensors on every rank
  auto q = at::randn({B, H, seq_len, D}, at::kDouble).requires_grad_(true);
  auto k = at::randn({B, kv_heads, seq_len, D}, at::kDouble).requires_grad_(true);
  auto v = at::randn({B, kv_heads, seq_len, D}, at::kDouble).requires_grad_(true);
  const auto ref = full_attention(q, k, v, causal);
  const auto dout = at::randn_like(ref);
  ref.backward(dout);

  const SequenceSplit split{cp, seq_len, zigzag};
  const at::Tensor pos = split.positions(group.rank());
  auto mine = [&](const at::Tensor& t) {
    return t.detach().index_select(2, pos).to(at::kFloat).contiguous();
  };
  auto lq = mine(q).requires_grad_(true), lk = mine(k).requires_grad_(true),
       lv = mine(v).requires_grad_(true);
  const auto out = kind == Kind::Ring
                       ? parallel::context::ring_attention(lq, lk, lv, split, group, causal)
                       : parallel::context::allgather_attention(lq, lk, lv, split, group, causal);
  out.backward(mine(dout));
  CHECK(at::allclose(out, mine(ref), 1e-5, 1e-5));
  CHECK(at::allclose(lq.grad(), mine(q.grad()), 1e-5, 1e-5));
  CHECK(at::allclose(lk.grad(), mine(k.grad()), 1e-5, 1e-5));
  CHECK(at::allclose(lv.grad(), mine(v.grad()), 1e-5, 1e-5));
}

}  // namespace

TEST_CASE("ring attention over the world equals full attention, outputs and grads",
          "[world2][world4]") {
  for (bool zigzag : {true, false})
    for (bool causal : {true, false})
      for (int64_t kv_heads : {4, 2}) check_ring(16, zigzag, causal, kv_heads);
}

TEST_CASE("all-gather attention over the world equals full attention, outputs and grads",
          "[world2][world4]") {
  for (bool zigzag : {true, false})
    for (bool causal : {true, false})
      for (int64_t kv_heads : {4, 2}) check_ring(16, zigzag, causal, kv_heads, Kind::AllGather);
}

TEST_CASE("ring attention refuses a sequence that does not divide into its chunks",
          "[world2][world4]") {
  auto& group = dist::world();
  const int64_t cp = group.size();
  const SequenceSplit odd{cp, 4 * cp + 2, true};
  CHECK_THROWS_WITH(odd.validate(), Catch::Contains("must divide into " + std::to_string(2 * cp)) &&
                                        Catch::Contains("set train.seq_len to a multiple of"));
  auto q = at::zeros({1, 2, 2, 4});
  CHECK_THROWS_WITH(
      parallel::context::ring_attention(q, q, q, SequenceSplit{cp + 1, 8, false}, group),
      Catch::Contains("the group has " + std::to_string(cp) + " ranks"));
}
