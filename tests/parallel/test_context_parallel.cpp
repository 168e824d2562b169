// Ring and all-gather attention (parallel/context/ring_attention.h) over the world as the cp group,
// real processes on Gloo: every rank holds its chunk of the sequence (plain, or zigzag), and its
// rows of the output and of dq, dk, dv equal full attention's on one device (double precision, each
// rank computing the reference on the whole sequence from the same seed) within 1e-5.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include "common/attention_reference.h"

#include <cmath>

#include "common/train_util.h"
#include "vescale/dist/world.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/model.h"
#include "vescale/parallel/context/context_parallel.h"
#include "vescale/parallel/context/ring_attention.h"
#include "vescale/random/random.h"

using namespace vescale;
using vescale::parallel::context::SequenceSplit;
using vescale::testing::full_attention;

namespace {

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

namespace {

// A LLaMA's loss and gradients on one device against the same model with its attention cores
// run over the world as the cp group: each rank forwards its chunk of every sequence at its
// positions, the loss is its tokens' mean, and the gradients are averaged over cp (each rank
// holds the same number of tokens, so that is the whole batch's mean).
void check_llama(bool zigzag, parallel::context::ContextAttention kind) {
  CAPTURE(zigzag, kind == parallel::context::ContextAttention::Ring);
  auto& group = dist::world();
  const int64_t cp = group.size(), T = 32;
  const auto o = testing::tiny_llama(T);
  auto build = [&] {
    random::manual_seed(5);
    models::Llama m(o);
    m->init_weights();
    return m;
  };
  // Every rank the same weights and tokens.
  const auto tokens = testing::counting_tokens(9, 2, T, o.vocab_size);
  const auto input = tokens.narrow(1, 0, T), targets = tokens.narrow(1, 1, T);

  auto one = build();
  const auto one_model = models::trunk_model(one.ptr(), [] {});
  const at::Tensor ref = testing::lm_loss(one_model.forward(input), targets);
  ref.backward();

  auto split_model = build();
  const auto model = models::trunk_model(split_model.ptr(), [] {});
  {  // the same weights
    at::NoGradGuard no_grad;
    auto from = one->named_parameters();
    for (auto& p : split_model->named_parameters()) p.value().copy_(from[p.key()]);
  }
  const parallel::context::SequenceSplit split{cp, T, zigzag};
  auto links = parallel::context::attend_over_split_sequence(*model.module, model.attention_cores,
                                                             split, group, kind);
  const at::Tensor pos = split.positions(group.rank());
  at::Tensor loss = testing::lm_loss(model.forward_at(input.index_select(1, pos), pos),
                                     targets.index_select(1, pos));
  loss.backward();
  at::Tensor mean = loss.detach().clone();
  group.all_reduce(mean, dist::ReduceOp::Avg).wait();
  CHECK(mean.item<double>() == Approx(ref.item<double>()).epsilon(1e-5));
  const auto ours = split_model->named_parameters(), theirs = one->named_parameters();
  for (const auto& p : ours) {
    at::Tensor g = p.value().grad().clone();
    group.all_reduce(g, dist::ReduceOp::Avg).wait();
    const at::Tensor& want = theirs[p.key()].grad();
    CAPTURE(p.key());
    CHECK(at::allclose(g, want, 1e-5, 1e-5 * want.abs().max().item<double>()));
  }
}

}  // namespace

TEST_CASE("a LLaMA with its attention over a split sequence has one device's loss and grads",
          "[world1][world2][world4]") {
  for (bool zigzag : {true, false})
    for (auto kind : {parallel::context::ContextAttention::Ring,
                      parallel::context::ContextAttention::AllGather})
      check_llama(zigzag, kind);
}
