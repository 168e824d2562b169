// HF import helpers that need no reference files: the Meta-to-rotate-half permutation of wq/wk
// against an interleaved RoPE written out by hand, and load_state_dict's errors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>

#include "shared/hf_import.h"
#include "llama/llama.h"

TEST_CASE(
    "permute_interleaved_rope makes our rotate-half RoPE give Meta's interleaved attention scores",
    "[models]") {
  torch::manual_seed(5);
  const int64_t H = 2, hd = 8, dim = 16, T = 6;
  auto w_meta = at::randn({H * hd, dim}, at::kDouble);
  auto x = at::randn({T, dim}, at::kDouble);
  auto angle = [&](int64_t p, int64_t j) { return p * std::pow(1e4, -2.0 * j / hd); };

  // Meta: pairs (2j, 2j+1) of each head rotated by angle(p, j).
  auto meta = at::matmul(x, w_meta.t()).view({T, H, hd}).clone();
  for (int64_t p = 0; p < T; ++p)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < hd / 2; ++j) {
        const double a = meta[p][h][2 * j].item<double>(), b = meta[p][h][2 * j + 1].item<double>();
        meta[p][h][2 * j] = a * std::cos(angle(p, j)) - b * std::sin(angle(p, j));
        meta[p][h][2 * j + 1] = b * std::cos(angle(p, j)) + a * std::sin(angle(p, j));
      }
  // Ours: the permuted weight, then rotate-half.
  models::LlamaOptions o{
      .dim = H * hd, .n_heads = H, .n_kv_heads = H, .rope_theta = 1e4, .max_seq_len = T};
  auto [cos, sin] = models::rope_tables(o, at::TensorOptions());
  auto ours = at::matmul(x, models::permute_interleaved_rope(w_meta, H).t())
                  .view({T, H, hd})
                  .transpose(0, 1);
  ours = models::apply_rope(ours, cos.to(at::kDouble), sin.to(at::kDouble)).transpose(0, 1);
  // Same q.q' dot products per head (the layout inside a head differs, the scores do not).
  auto scores = [](const at::Tensor& q) {
    return at::matmul(q.transpose(0, 1), q.transpose(0, 1).transpose(1, 2));
  };
  CHECK(at::allclose(scores(ours), scores(meta), 1e-5, 1e-6));
  CHECK(
      !at::allclose(scores(at::matmul(x, w_meta.t()).view({T, H, hd})), scores(meta), 1e-3, 1e-3));
}

TEST_CASE("load_state_dict copies parameters and names missing, unexpected and misshapen keys",
          "[models]") {
  models::LlamaOptions o{.vocab_size = 16,
                         .dim = 8,
                         .n_layers = 1,
                         .n_heads = 2,
                         .n_kv_heads = 1,
                         .ffn_dim = 8,
                         .max_seq_len = 4};
  models::Llama a(o), b(o);
  models::StateDict sd;
  for (const auto& p : a->named_parameters()) sd[p.key()] = p.value().detach().clone();
  models::load_state_dict(*b, sd);
  for (const auto& p : b->named_parameters()) CHECK(p.value().equal(sd.at(p.key())));

  sd.erase("layers.0.ffn_norm.weight");
  sd["layers.0.attention.bias"] = at::zeros({8});
  sd["norm.weight"] = at::zeros({9});
  CHECK_THROWS_WITH(
      models::load_state_dict(*b, sd),
      Catch::Matchers::Contains("missing: layers.0.ffn_norm.weight") &&
          Catch::Matchers::Contains("unexpected: layers.0.attention.bias") &&
          Catch::Matchers::Contains("shape mismatch: norm.weight (file [9], model [8])"));
}
