// The op harness: for each op with a rule, every combination of input placements on a 1-D
// mesh (and a 2x2 mesh), even and uneven shapes. The gathered output and the gathered input
// gradients must equal the same op on the full tensors on one rank. The tensors live on the
// world's device: cpu, or cuda under VESCALE_TEST_DEVICE=cuda (the ctest label cuda).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <c10/core/AutogradState.h>

#include <cmath>
#include <functional>
#include <thread>

#include "dtensor/dtensor_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

using namespace vescale;
using namespace vescale::dtensor;
using vescale::testing::all_placements;
using vescale::testing::describe;
using vescale::testing::device;
using vescale::testing::full_randn;
using vescale::testing::make_input;

namespace {

using Fn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

struct OpCase {
  std::string name;
  std::vector<at::Tensor> inputs;  // full tensors
  Fn fn;
  bool partial = false;  // also try Partial inputs (ops linear in their inputs)
  bool grad = true;
};

void cartesian(const std::vector<std::vector<Placements>>& per_input, size_t i,
               std::vector<Placements>& cur,
               const std::function<void(const std::vector<Placements>&)>& visit) {
  if (i == per_input.size()) return visit(cur);
  for (auto& p : per_input[i]) {
    cur.push_back(p);
    cartesian(per_input, i + 1, cur, visit);
    cur.pop_back();
  }
}

// Every placement combination, or, past `max_combos`, an evenly strided sample of them.
void check_op(const mesh::DeviceMesh& mesh, const OpCase& c, int64_t max_combos = 1 << 30) {
  auto wants_grad = [&](const at::Tensor& x) {
    return c.grad && at::isFloatingType(x.scalar_type());
  };
  std::vector<at::Tensor> refs;
  for (auto& x : c.inputs)
    refs.push_back(wants_grad(x) ? x.clone().requires_grad_(true) : x.clone());
  at::Tensor ref_out = c.fn(refs);
  at::Tensor g = full_randn(ref_out.sizes().vec(), 99);
  if (c.grad) (ref_out * g).sum().backward();

  std::vector<std::vector<Placements>> per_input;
  for (auto& x : c.inputs)
    per_input.push_back(
        all_placements(mesh, x.dim(), c.partial && at::isFloatingType(x.scalar_type())));
  int64_t total = 1;
  for (auto& p : per_input) total *= static_cast<int64_t>(p.size());
  const int64_t stride = (total + max_combos - 1) / max_combos;
  std::vector<Placements> cur;
  int64_t combos = 0, index = 0;
  cartesian(per_input, 0, cur, [&](const std::vector<Placements>& ps) {
    if (index++ % stride != 0) return;
    ++combos;
    INFO(c.name << " with inputs " << describe(ps));
    std::vector<at::Tensor> xs;
    for (size_t i = 0; i < ps.size(); ++i) {
      auto x = make_input(c.inputs[i], mesh, ps[i]).detach();
      xs.push_back(wants_grad(c.inputs[i]) ? x.requires_grad_(true) : x);
    }
    at::Tensor out = c.fn(xs);
    REQUIRE(is_dtensor(out));
    CHECK(out.sizes() == ref_out.sizes());
    CHECK(at::allclose(full_tensor(out), ref_out, 1e-4, 1e-5));
    if (!c.grad) return;
    auto gd = distribute_tensor(g, mesh, Placements(mesh.ndim(), Replicate()));
    (out * gd).sum().backward();
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!wants_grad(c.inputs[i])) continue;
      INFO("gradient of input " << i);
      REQUIRE(xs[i].grad().defined());
      CHECK(at::allclose(full_tensor(xs[i].grad()), refs[i].grad(), 1e-4, 1e-5));
    }
  });
  CHECK(combos > 0);
}

std::vector<OpCase> op_cases(int64_t w) {
  const int64_t n = 2 * w, u = w + 1;  // even and uneven sizes
  auto r = [](std::vector<int64_t> s, uint64_t seed) { return full_randn(s, seed); };
  auto ids = [](std::vector<int64_t> s, int64_t high, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randint(high, s, gen, at::kLong).to(device());
  };
  return {
      {"add", {r({n, u}, 1), r({n, u}, 2)}, [](auto& x) { return x[0] + x[1]; }, true},
      {"add broadcast bias", {r({n, u}, 1), r({u}, 2)}, [](auto& x) { return x[0] + x[1]; }},
      {"sub alpha",
       {r({u, n}, 1), r({u, n}, 2)},
       [](auto& x) { return at::sub(x[0], x[1], 2.0); },
       true},
      {"mul", {r({n, u}, 1), r({n, u}, 2)}, [](auto& x) { return x[0] * x[1]; }, true},
      {"div", {r({n, u}, 1), r({n, u}, 2).abs() + 1}, [](auto& x) { return x[0] / x[1]; }, true},
      {"mul scalar", {r({u, n}, 3)}, [](auto& x) { return x[0] * 3.0; }, true},
      {"neg exp tanh", {r({n, u}, 4)}, [](auto& x) { return at::tanh(at::exp(-x[0])); }},
      {"gelu", {r({u, n}, 5)}, [](auto& x) { return at::gelu(x[0], "tanh"); }},
      {"relu sigmoid", {r({n, 3}, 6)}, [](auto& x) { return at::sigmoid(at::relu(x[0])); }},
      {"where",
       {r({n, u}, 7), r({n, u}, 8)},
       [](auto& x) { return at::where(x[0] > 0, x[0], x[1]); }},
      {"mm", {r({n, u}, 10), r({u, n}, 11)}, [](auto& x) { return at::mm(x[0], x[1]); }, true},
      {"addmm",
       {r({n}, 12), r({u, n}, 13), r({n, n}, 14)},
       [](auto& x) { return at::addmm(x[0], x[1], x[2], 0.5, 2.0); }},
      {"linear",
       {r({n, u}, 15), r({n, u}, 16), r({n}, 17)},
       [](auto& x) { return at::linear(x[0], x[1], x[2]); }},
      {"bmm", {r({2, n, u}, 18), r({2, u, 3}, 19)}, [](auto& x) { return at::bmm(x[0], x[1]); }},
      {"sum all", {r({n, u}, 20)}, [](auto& x) { return x[0].sum(); }, true},
      {"sum dim", {r({n, u}, 21)}, [](auto& x) { return x[0].sum(1); }, true},
      {"sum keepdim", {r({u, n}, 22)}, [](auto& x) { return x[0].sum({0}, true); }, true},
      {"mean dim", {r({n, u}, 23)}, [](auto& x) { return x[0].mean(0); }, true},
      {"mean all", {r({u, n}, 24)}, [](auto& x) { return x[0].mean(); }},
      {"amax", {r({n, u}, 25)}, [](auto& x) { return at::amax(x[0], {1}); }},
      {"t", {r({n, u}, 26)}, [](auto& x) { return x[0].t(); }, true},
      {"transpose 3d", {r({2, n, u}, 27)}, [](auto& x) { return x[0].transpose(0, 2); }},
      {"permute",
       {r({2, n, u}, 28)},
       [](auto& x) {
         return x[0].permute({1, 2, 0});
       }},
      {"unsqueeze", {r({n, u}, 29)}, [](auto& x) { return x[0].unsqueeze(1); }},
      {"expand",
       {r({n, 1}, 30)},
       [n, u](auto& x) {
         return x[0].expand({n, u});
       }},
      {"view flatten", {r({n, u}, 31)}, [](auto& x) { return x[0].reshape({-1}); }},
      {"view split",
       {r({n * u}, 32)},
       [u](auto& x) {
         return x[0].view({-1, u});
       }},
      {"view heads",
       {r({n, 2 * u}, 33)},
       [n, u](auto& x) {
         return x[0].view({n, 2, u}).transpose(1, 2);
       }},
      {"select narrow",
       {r({n, u}, 34)},
       [](auto& x) { return x[0].select(1, 0) + x[0].narrow(1, 1, 1).squeeze(1); }},
      {"cat",
       {r({n, u}, 35), r({n, 2}, 36)},
       [](auto& x) {
         return at::cat({x[0], x[1]}, 1);
       }},
      {"to double",
       {r({n, u}, 37)},
       [](auto& x) { return x[0].to(at::kDouble).to(at::kFloat) * 2; }},
      {"ones_like", {r({n, u}, 38)}, [](auto& x) { return x[0] * at::ones_like(x[0]); }},
      {"in-place",
       {r({n, u}, 39), r({n, u}, 40)},
       [](auto& x) { return x[0].clone().mul_(x[1]).add_(x[1]); }},
      {"softmax", {r({n, u}, 41)}, [](auto& x) { return at::softmax(x[0], -1); }},
      {"log_softmax dim 0", {r({u, n}, 42)}, [](auto& x) { return at::log_softmax(x[0], 0); }},
      {"cross_entropy mean",
       {r({n, u + 2}, 43), ids({n}, u + 2, 44)},
       [](auto& x) { return at::cross_entropy_loss(x[0], x[1]); }},
      {"cross_entropy sum, ignore_index",
       {r({u, n}, 45), ids({u}, n, 46).masked_fill(ids({u}, 2, 47) == 0, -100)},
       [](auto& x) { return at::cross_entropy_loss(x[0], x[1], {}, at::Reduction::Sum, -100); }},
      {"embedding",
       {r({n + 1, u}, 48), ids({2, 3}, n + 1, 49)},
       [](auto& x) { return at::embedding(x[0], x[1]); }},
      {"layer_norm",
       {r({2, n, u}, 50), r({u}, 51), r({u}, 52)},
       [u](auto& x) { return at::layer_norm(x[0], {u}, x[1], x[2]); }},
      {"rms_norm",
       {r({n, u}, 53), r({u}, 54)},
       [u](auto& x) { return at::rms_norm(x[0], {u}, x[1], 1e-5); }},
      {"vector_norm 2", {r({n, u}, 55)}, [](auto& x) { return at::linalg_vector_norm(x[0], 2); }},
      {"vector_norm inf",
       {r({u, n}, 56)},
       [](auto& x) { return at::linalg_vector_norm(x[0], INFINITY); },
       false,
       false},
      {"tril", {r({n, u}, 57)}, [](auto& x) { return at::tril(x[0]); }},
      {"index_select",
       {r({n, u}, 58), ids({3}, n, 59)},
       [](auto& x) { return at::index_select(x[0], 0, x[1]); }},
      {"gather",
       {r({n, u}, 60), ids({n, 2}, u, 61)},
       [](auto& x) { return at::gather(x[0], 1, x[1]); }},
      {"topk values", {r({n, u}, 62)}, [](auto& x) { return std::get<0>(at::topk(x[0], 2, 1)); }},
      {"stack",
       {r({n, u}, 63), r({n, u}, 64)},
       [](auto& x) {
         return at::stack({x[0], x[1]}, 1);
       }},
      {"cumsum", {r({n, u}, 72)}, [](auto& x) { return at::cumsum(x[0], 1); }, true},
      {"max.dim values + argmax",
       {r({n, u}, 73)},
       [](auto& x) { return std::get<0>(at::max(x[0], 0)) + at::argmax(x[0], 0).to(at::kFloat); }},
      {"masked_fill", {r({n, u}, 65)}, [](auto& x) { return x[0].masked_fill(x[0] > 0.5, -1.0); }},
      {"causal attention",
       {r({2, n, 3, 4}, 66), r({2, n, 3, 4}, 67), r({2, n, 3, 4}, 68)},
       [](auto& x) { return at::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true); }},
      // The fused rule (rules/attention.cpp): uneven head shards, no causal mask with a longer
      // key sequence, an explicit scale; a value head dim of its own and a mask take the math path.
      {"attention uneven heads, kv longer, scale",
       {r({2, u, 3, 4}, 74), r({2, u, 5, 4}, 75), r({2, u, 5, 4}, 76)},
       [](auto& x) {
         return at::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, false, 0.3);
       }},
      {"attention value head dim 6 (math path)",
       {r({u, 2, 3, 4}, 85), r({u, 2, 3, 4}, 86), r({u, 2, 3, 6}, 87)},
       [](auto& x) { return at::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true); }},
      {"attention with a mask (math path)",
       {r({n, 2, 3, 4}, 77), r({n, 2, 3, 4}, 78), r({n, 2, 3, 4}, 79)},
       [](auto& x) {
         auto mask = at::ones({3, 3}, at::TensorOptions(at::kBool).device(device())).tril(1);
         return at::scaled_dot_product_attention(x[0], x[1], x[2], mask, 0.0, false);
       }},
  };
}

}  // namespace

TEST_CASE("ops on a 1-D mesh match single-device, forward and backward", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  for (auto& c : op_cases(mesh.size())) {
    SECTION(c.name) { check_op(mesh, c); }
  }
}

TEST_CASE("ops on a 2x2 mesh match single-device", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  for (auto& c : op_cases(2)) {
    // 3 inputs or 4-D tensors give thousands of combinations on 2 mesh dims: a strided sample.
    SECTION(c.name) { check_op(mesh, c, 120); }
  }
}

TEST_CASE("an op without a rule names itself, and the opt-in fallback gathers",
          "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto full = full_randn({6, 4}, 50);
  auto x = distribute_tensor(full, mesh, {Shard(1)});
  CHECK_THROWS_WITH(at::logcumsumexp(x, 0),
                    Catch::Matchers::Contains("no sharding rule for aten::logcumsumexp"));
  set_replicate_fallback(true);
  auto y = at::logcumsumexp(x, 0);
  set_replicate_fallback(false);
  CHECK(spec_of(y).is_replicated());
  CHECK(at::allclose(full_tensor(y), at::logcumsumexp(full, 0)));
}

TEST_CASE("distribute_tensor from one source rank", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const int src = mesh.size() - 1;
  auto mine = dist::rank() == src ? full_randn({5, 3}, 80) : at::zeros({5, 3}, device());
  auto dt = distribute_tensor(mine, mesh, {Shard(0)}, src);
  CHECK(at::equal(full_tensor(dt), full_randn({5, 3}, 80)));
}

TEST_CASE("distribute_tensor from one rank broadcasts over a 2-D mesh's group",
          "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"a", 2}, {"b", -1}});
  const int src = 1;  // the mesh's linear index 1: coordinate (0, 1), or (1, 0) when b = 1
  auto mine = dist::rank() == src ? full_randn({6, 4}, 81) : at::zeros({6, 4}, device());
  auto dt = distribute_tensor(mine, mesh, {Shard(0), Shard(1)}, src);
  CHECK(at::equal(full_tensor(dt), full_randn({6, 4}, 81)));
  CHECK_THROWS_WITH(distribute_tensor(mine, mesh, {Shard(0), Shard(1)}, mesh.size()),
                    Catch::Matchers::Contains("is outside the mesh"));
}

TEST_CASE("the propagation cache is hit on repeated calls", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  auto a = distribute_tensor(full_randn({8, 8}, 1), mesh, {Shard(0)});
  auto b = distribute_tensor(full_randn({8, 8}, 2), mesh, {Replicate()});
  (void)at::mm(a, b);
  reset_dispatch_stats();
  for (int i = 0; i < 5; ++i) (void)at::mm(a, b);
  auto s = dispatch_stats();
  CHECK(s.calls == 5);
  CHECK(s.cache_hits == 5);
}

TEST_CASE("vocab-parallel cross-entropy never gathers the logits", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t vocab = 4 * mesh.size() + 1;  // uneven shards
  auto full = full_randn({6, vocab}, 70);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(71);
  auto target = at::randint(vocab, {6}, gen, at::kLong).to(device());
  auto ref = full.clone().requires_grad_(true);
  auto ref_loss = at::cross_entropy_loss(ref, target);
  ref_loss.backward();

  auto logits = distribute_tensor(full, mesh, {Shard(1)}).requires_grad_(true);
  auto tgt = distribute_tensor(target, mesh, {Replicate()});
  reset_dispatch_stats();
  const auto c0 = dist::collective_stats();
  auto loss = at::cross_entropy_loss(logits, tgt);
  CHECK(dispatch_stats().redistributions == 0);
  // The fused loss (rules/cross_entropy.cpp): the row max and the sum of exponentials are the
  // only collectives; the gradient (softmax - onehot) is local.
  const auto c1 = dist::collective_stats();
  CHECK(c1.all_reduce - c0.all_reduce == 2);
  CHECK(c1.total() - c0.total() == 2);
  CHECK(spec_of(loss).placements == Placements{Partial()});
  loss.backward();
  CHECK(dist::collective_stats().total() == c1.total());
  CHECK(dispatch_stats().redistributions == 0);
  CHECK(spec_of(logits.grad()).placements == Placements{Shard(1)});
  CHECK(full_tensor(loss).item<float>() == Approx(ref_loss.item<float>()).epsilon(1e-6));
  CHECK(at::allclose(full_tensor(logits.grad()), ref.grad(), 1e-5, 1e-7));
}

TEST_CASE("fused vocab-parallel cross-entropy: sum with ignored rows, label smoothing falls back",
          "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t vocab = 3 * mesh.size() - 1;  // uneven; at world 4 the last shard is short
  auto full = full_randn({7, vocab}, 90);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(91);
  auto target = at::randint(vocab, {7}, gen, at::kLong);
  target.index_put_({at::tensor({1, 4})}, -100);
  target = target.to(device());
  for (double smoothing : {0.0, 0.1}) {
    INFO("label_smoothing " << smoothing);
    auto ref = full.clone().requires_grad_(true);
    auto ref_loss = at::cross_entropy_loss(ref, target, {}, at::Reduction::Sum, -100, smoothing);
    ref_loss.backward();
    auto logits = distribute_tensor(full, mesh, {Shard(1)}).requires_grad_(true);
    auto loss = at::cross_entropy_loss(logits, target, {}, at::Reduction::Sum, -100, smoothing);
    loss.backward();
    CHECK(full_tensor(loss).item<float>() == Approx(ref_loss.item<float>()).epsilon(1e-6));
    CHECK(at::allclose(full_tensor(logits.grad()), ref.grad(), 1e-5, 1e-7));
  }
}

TEST_CASE("fused vocab-parallel cross-entropy with batch shards on a 2x2 mesh", "[world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}});
  auto full = full_randn({6, 9}, 92);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(93);
  auto target = at::randint(9, {6}, gen, at::kLong);
  target.index_put_({at::tensor({0, 5})}, -100);  // the mean counts valid rows over the dp shards
  target = target.to(device());
  auto ref = full.clone().requires_grad_(true);
  auto ref_loss = at::cross_entropy_loss(ref, target);
  ref_loss.backward();
  auto logits = distribute_tensor(full, mesh, {Shard(0), Shard(1)}).requires_grad_(true);
  auto tgt = distribute_tensor(target, mesh, {Shard(0), Replicate()});
  const auto c0 = dist::collective_stats();
  auto loss = at::cross_entropy_loss(logits, tgt);
  loss.backward();
  // max and sum of exponentials over tp, the valid-row count over dp; nothing in backward.
  CHECK(dist::collective_stats().total() - c0.total() == 3);
  CHECK(spec_of(loss).placements == Placements{Partial(), Partial()});
  CHECK(spec_of(logits.grad()).placements == Placements{Shard(0), Shard(1)});
  CHECK(full_tensor(loss).item<float>() == Approx(ref_loss.item<float>()).epsilon(1e-6));
  CHECK(at::allclose(full_tensor(logits.grad()), ref.grad(), 1e-5, 1e-7));
}

TEST_CASE("fused attention keeps batch and head shards with no collectives", "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"tp", -1}});
  const int64_t heads = 2 * mesh.size();
  std::vector<at::Tensor> full{full_randn({3, heads, 7, 8}, 81), full_randn({3, heads, 7, 8}, 82),
                               full_randn({3, heads, 7, 8}, 83)};
  std::vector<at::Tensor> ref;
  for (auto& t : full) ref.push_back(t.clone().requires_grad_(true));
  auto ref_out = at::scaled_dot_product_attention(ref[0], ref[1], ref[2], {}, 0.0, true);
  auto g = full_randn(ref_out.sizes().vec(), 84);
  (ref_out * g).sum().backward();
  for (int64_t dim : {0, 1}) {
    INFO("Shard(" << dim << ")");
    std::vector<at::Tensor> xs;
    for (auto& t : full)
      xs.push_back(distribute_tensor(t, mesh, {Shard(dim)}).requires_grad_(true));
    auto gd = distribute_tensor(g, mesh, {Shard(dim)});
    const auto before = dist::collective_stats();
    reset_dispatch_stats();
    auto out = at::scaled_dot_product_attention(xs[0], xs[1], xs[2], {}, 0.0, true);
    out.backward(gd);
    CHECK(dist::collective_stats().total() == before.total());
    CHECK(dispatch_stats().redistributions == 0);
    CHECK(spec_of(out).placements == Placements{Shard(dim)});
    CHECK(at::allclose(full_tensor(out), ref_out, 1e-5, 1e-6));
    for (size_t i = 0; i < 3; ++i) {
      CHECK(spec_of(xs[i].grad()).placements == Placements{Shard(dim)});
      CHECK(at::allclose(full_tensor(xs[i].grad()), ref[i].grad(), 1e-5, 1e-6));
    }
  }
}

TEST_CASE("BackwardOnCallerThread runs DTensor backward on the caller's thread", "[any]") {
  auto mesh = mesh::DeviceMesh::init({{"x", -1}});
  const auto full = full_randn({4 * mesh.size(), 3}, 80);
  auto grad_thread = [&](bool same_thread, at::Tensor& grad) {
    auto x = distribute_tensor(full, mesh, {Shard(0)}).requires_grad_(true);
    std::thread::id seen;
    x.register_hook([&](const at::Tensor& g) {
      seen = std::this_thread::get_id();
      return g;
    });
    auto loss = at::mul(x, 3.0).sum();
    if (same_thread) {
      BackwardOnCallerThread guard;
      loss.backward();
    } else {
      loss.backward();
    }
    grad = full_tensor(x.grad());
    return seen;
  };
  at::Tensor g_default, g_same;
  // libtorch's default: a non-CPU device's nodes run on that device's worker thread.
  CHECK(grad_thread(false, g_default) != std::this_thread::get_id());
  CHECK(grad_thread(true, g_same) == std::this_thread::get_id());
  CHECK(at::equal(g_same, at::full_like(full, 3.0)));
  CHECK(at::equal(g_default, g_same));
  // The guard restores the setting it found.
  CHECK(c10::AutogradState::get_tls_state().get_multithreading_enabled());
}

TEST_CASE(
    "a router's top-k, its backward and a one-hot scatter keep the token shards with no "
    "collectives",
    "[world2][world4]") {
  auto mesh = mesh::DeviceMesh::init({{"dp", -1}});
  const int64_t rows = 3 * mesh.size(), experts = 5;
  const auto full = full_randn({rows, experts}, 91), g = full_randn({rows, 2}, 92);
  auto ref = full.clone().requires_grad_(true);
  auto [ref_top, ref_ids] = ref.topk(2, -1);
  (ref_top * g).sum().backward();
  const auto ref_hot = at::zeros({rows, experts}).scatter_(-1, ref_ids, 1.0);

  auto x = distribute_tensor(full, mesh, {Shard(0)}).requires_grad_(true);
  const auto before = dist::collective_stats();
  auto [top, ids] = x.topk(2, -1);
  top.backward(distribute_tensor(g, mesh, {Shard(0)}));
  // One-hot's scatter writes into fresh replicated zeros: narrowing them is free, gathering the
  // ids is not.
  auto hot = distribute_tensor(at::zeros({rows, experts}), mesh, {Replicate()});
  hot.scatter_(-1, ids, 1.0);
  CHECK(dist::collective_stats().total() == before.total());
  CHECK(spec_of(hot).placements == Placements{Shard(0)});
  CHECK(spec_of(x.grad()).placements == Placements{Shard(0)});
  CHECK(at::equal(full_tensor(hot), ref_hot));
  CHECK(at::equal(full_tensor(x.grad()), ref.grad()));
}
