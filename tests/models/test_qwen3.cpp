// Qwen3, dense and MoE: the published sizes counted and built on the meta device, the per-head
// q/k norm against a hand computation of one head, and the MoE without renormalized top-k.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "vescale/models/qwen3/qwen3.h"
#include "vescale/models/shared/meta_device.h"

using vescale::models::Qwen3;
using vescale::models::Qwen3Moe;

TEST_CASE("Qwen3-8B has 8.19B parameters and Qwen3-30B-A3B 30.53B, counted and built on meta",
          "[models]") {
  // 2 x 151936 x 4096 + 36 x (2 x 4096 x 4096 + 2 x 4096 x 1024 + 2 x 128 + 2 x 4096
  // + 3 x 4096 x 12288) + 4096
  CHECK(vescale::models::qwen3_parameter_count(vescale::models::qwen3_8b()) == 8190735360);
  // 2 x 151936 x 2048 + 48 x (2 x 2048 x 4096 + 2 x 2048 x 512 + 2 x 128 + 2 x 2048
  // + 128 x 3 x 2048 x 768 + 128 x 2048) + 2048
  CHECK(vescale::models::qwen3_moe_parameter_count(vescale::models::qwen3_30b_a3b()) ==
        30532122624);
  Qwen3 dense{nullptr};
  Qwen3Moe moe{nullptr};
  {
    vescale::models::MetaDeviceScope meta;
    dense = Qwen3(vescale::models::qwen3_8b());
    moe = Qwen3Moe(vescale::models::qwen3_30b_a3b());
  }
  CHECK(vescale::models::count_parameters(*dense) == 8190735360);
  CHECK(vescale::models::count_parameters(*moe) == 30532122624);
  auto p = moe->named_parameters();
  // 32 heads of 128 over a width of 2048: q is [4096, 2048], o [2048, 4096].
  CHECK(p["layers.0.attention.wq.weight"].sizes() == c10::IntArrayRef({4096, 2048}));
  CHECK(p["layers.0.attention.wo.weight"].sizes() == c10::IntArrayRef({2048, 4096}));
  CHECK(p["layers.0.attention.q_norm.weight"].sizes() == c10::IntArrayRef({128}));
  CHECK(p["layers.47.feed_forward.experts.w2"].sizes() == c10::IntArrayRef({128, 2048, 768}));
}

TEST_CASE("Qwen3 attention normalizes each head of q and k before the rotation", "[models]") {
  torch::manual_seed(2);
  vescale::models::Qwen3Options o;
  o.llama = {.vocab_size = 32, .dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
             .ffn_dim = 8, .norm_eps = 1e-6, .rope_theta = 10000.0, .max_seq_len = 8};
  o.head_dim = 6;
  vescale::models::Attention attn(vescale::models::qwen3_trunk(o));
  {
    torch::NoGradGuard g;
    attn->q_norm->weight.uniform_(0.5, 1.5);
    attn->k_norm->weight.uniform_(0.5, 1.5);
  }
  auto [cos, sin] = vescale::models::rope_tables(vescale::models::qwen3_trunk(o), {});
  const int64_t T = 5;
  auto x = at::randn({1, T, 16});
  auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  auto y = attn->forward(x, c, s);

  // By hand in double: per head, q / rms(q) * weight, rotated; causal softmax; GQA (one kv head).
  auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  auto rms_norm = [&](const at::Tensor& t, const at::Tensor& w) {
    return t / (t.pow(2).mean(-1, true) + 1e-6).sqrt() * d(w);
  };
  auto rot = [&](const at::Tensor& t) {  // [T, 6] rotate-half
    auto r = at::cat({-t.narrow(-1, 3, 3), t.narrow(-1, 0, 3)}, -1);
    return t * d(c) + r * d(s);
  };
  auto xd = d(x[0]);
  auto q = at::matmul(xd, d(attn->wq->weight).t()).view({T, 2, 6});
  auto k = rot(rms_norm(at::matmul(xd, d(attn->wk->weight).t()), attn->k_norm->weight));
  auto v = at::matmul(xd, d(attn->wv->weight).t());
  std::vector<at::Tensor> heads;
  for (int64_t h = 0; h < 2; ++h) {
    auto qh = rot(rms_norm(q.select(1, h), attn->q_norm->weight));
    auto scores = at::matmul(qh, k.t()) / std::sqrt(6.0);
    scores = scores.masked_fill(at::ones({T, T}, at::kBool).triu(1), -INFINITY);
    heads.push_back(at::matmul(at::softmax(scores, -1), v));
  }
  auto want = at::matmul(at::cat(heads, -1), d(attn->wo->weight).t());
  CHECK(at::allclose(d(y[0]), want, 1e-5, 1e-6));
}

TEST_CASE("Qwen3-MoE without renormalized top-k gates by the full softmax's probabilities",
          "[models]") {
  torch::manual_seed(3);
  vescale::models::MoEOptions mo{.n_experts = 4, .top_k = 2, .normalize_top_k = false};
  vescale::models::MoE moe(8, 6, mo);
  {
    torch::NoGradGuard g;
    moe->router->weight.normal_(0, 0.5);
  }
  auto x = at::randn({1, 3, 8});
  auto y = moe->forward(x);
  auto probs = at::softmax(moe->router_logits.to(at::kDouble), -1);
  auto [p, e] = probs.topk(2, -1);
  auto flat = x.reshape({-1, 8}).to(at::kDouble);
  auto want = at::zeros_like(flat);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t ex = e[n][j].item<int64_t>();
      auto w1 = moe->experts->w1[ex].to(at::kDouble), w2 = moe->experts->w2[ex].to(at::kDouble),
           w3 = moe->experts->w3[ex].to(at::kDouble);
      auto h = at::silu(at::matmul(w1, flat[n])) * at::matmul(w3, flat[n]);
      want[n] += p[n][j] * at::matmul(w2, h);  // gates sum to less than 1
    }
  CHECK(at::allclose(y.reshape({-1, 8}).to(at::kDouble), want, 1e-5, 1e-6));
  CHECK((p.sum(-1) < 1).all().item<bool>());
}
