// HF import helpers that need no reference files: the Meta-to-rotate-half permutation of wq/wk
// against an interleaved RoPE written out by hand, and load_state_dict's errors.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <cmath>

#include <torch/nn/module.h>

#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/gpt/gpt.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/mixtral/mixtral.h"

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
  vescale::models::LlamaOptions o{
      .dim = H * hd, .n_heads = H, .n_kv_heads = H, .rope_theta = 1e4, .max_seq_len = T};
  auto [cos, sin] = vescale::models::rope_tables(o, at::TensorOptions());
  auto ours = at::matmul(x, vescale::models::permute_interleaved_rope(w_meta, H).t())
                  .view({T, H, hd})
                  .transpose(0, 1);
  ours = vescale::models::apply_rope(ours, cos.to(at::kDouble), sin.to(at::kDouble)).transpose(0, 1);
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
  vescale::models::LlamaOptions o{.vocab_size = 16,
                         .dim = 8,
                         .n_layers = 1,
                         .n_heads = 2,
                         .n_kv_heads = 1,
                         .ffn_dim = 8,
                         .max_seq_len = 4};
  vescale::models::Llama a(o), b(o);
  vescale::models::StateDict sd;
  for (const auto& p : a->named_parameters()) sd[p.key()] = p.value().detach().clone();
  vescale::models::load_state_dict(*b, sd);
  for (const auto& p : b->named_parameters()) CHECK(p.value().equal(sd.at(p.key())));

  sd.erase("layers.0.ffn_norm.weight");
  sd["layers.0.attention.bias"] = at::zeros({8});
  sd["norm.weight"] = at::zeros({9});
  CHECK_THROWS_WITH(
      vescale::models::load_state_dict(*b, sd),
      Catch::Matchers::Contains("missing: layers.0.ffn_norm.weight") &&
          Catch::Matchers::Contains("unexpected: layers.0.attention.bias") &&
          Catch::Matchers::Contains("shape mismatch: norm.weight (file [9], model [8])"));
}

namespace {

// Every parameter of a model, by name (what from_hf produces and to_hf consumes).
vescale::models::StateDict params_of(torch::nn::Module& m) {
  vescale::models::StateDict sd;
  for (const auto& p : m.named_parameters()) sd[p.key()] = p.value().detach().clone();
  return sd;
}

void check_bitwise(const vescale::models::StateDict& got, const vescale::models::StateDict& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [k, t] : want) {
    INFO(k);
    REQUIRE(got.count(k) == 1);
    CHECK(got.at(k).sizes() == t.sizes());
    CHECK(at::equal(got.at(k), t));
  }
}

}  // namespace

TEST_CASE("ours -> Hugging Face -> ours gives the same tensors bitwise, for every family",
          "[hf_export]") {
  at::manual_seed(3);
  SECTION("LLaMA, untied and tied") {
    for (bool tied : {false, true}) {
      vescale::models::LlamaOptions o{.vocab_size = 40,
                             .dim = 16,
                             .n_layers = 2,
                             .n_heads = 4,
                             .n_kv_heads = 2,
                             .ffn_dim = 24,
                             .max_seq_len = 8,
                             .tie_embeddings = tied};
      vescale::models::Llama m(o);
      const auto ours = params_of(*m);
      const auto hf = vescale::models::llama_to_hf(ours, o);
      CHECK(hf.count("model.layers.1.self_attn.k_proj.weight") == 1);
      CHECK(hf.count("model.layers.0.mlp.gate_proj.weight") == 1);
      CHECK(hf.count("lm_head.weight") == (tied ? 0 : 1));  // save_pretrained drops a tied head
      check_bitwise(vescale::models::llama_from_hf(hf, o), ours);
      // And HF -> ours -> HF: the same HF tensors.
      check_bitwise(vescale::models::llama_to_hf(vescale::models::llama_from_hf(hf, o), o), hf);
    }
  }
  SECTION("Mixtral: stacked experts one by one") {
    vescale::models::MixtralOptions o;
    o.llama.vocab_size = 40, o.llama.dim = 16, o.llama.n_layers = 1, o.llama.n_heads = 4;
    o.llama.n_kv_heads = 2, o.llama.ffn_dim = 12, o.llama.max_seq_len = 8;
    o.moe.n_experts = 3, o.moe.top_k = 2;
    vescale::models::Mixtral m(o);
    const auto ours = params_of(*m);
    const auto hf = vescale::models::mixtral_to_hf(ours, o);
    const auto& e2 = hf.at("model.layers.0.block_sparse_moe.experts.2.w1.weight");
    CHECK(e2.sizes() == at::IntArrayRef{12, 16});
    CHECK(at::equal(e2, ours.at("layers.0.feed_forward.experts.w1")[2]));
    check_bitwise(vescale::models::mixtral_from_hf(hf, o), ours);
    check_bitwise(vescale::models::mixtral_to_hf(vescale::models::mixtral_from_hf(hf, o), o), hf);
  }
  SECTION("GPT-2: Conv1D layout, tied head") {
    vescale::models::GPTOptions o;
    o.vocab_size = 40, o.n_positions = 8, o.n_embd = 16, o.n_layer = 2, o.n_head = 2;
    vescale::models::GPT m(o);
    const auto ours = params_of(*m);
    const auto hf = vescale::models::gpt2_to_hf(ours, o);
    const auto& c_fc = hf.at("transformer.h.0.mlp.c_fc.weight");
    CHECK(c_fc.sizes() == at::IntArrayRef{16, 64});  // [in, out]
    CHECK(at::equal(c_fc, ours.at("h.0.mlp.c_fc.weight").t()));
    CHECK(hf.count("lm_head.weight") == 0);
    check_bitwise(vescale::models::gpt2_from_hf(hf, o), ours);
    check_bitwise(vescale::models::gpt2_to_hf(vescale::models::gpt2_from_hf(hf, o), o), hf);
  }
}

TEST_CASE("to_hf names what does not match the options", "[hf_export]") {
  vescale::models::LlamaOptions o{.vocab_size = 40,
                         .dim = 16,
                         .n_layers = 2,
                         .n_heads = 4,
                         .n_kv_heads = 2,
                         .ffn_dim = 24,
                         .max_seq_len = 8};
  vescale::models::Llama m(o);
  auto ours = params_of(*m);
  ours.erase("layers.1.ffn_norm.weight");
  ours["extra.weight"] = at::zeros({2});
  CHECK_THROWS_WITH(
      vescale::models::llama_to_hf(ours, o),
      Catch::Matchers::Contains("Llama to Hugging Face: the state dict does not "
                                "match the options; missing: layers.1.ffn_norm.weight "
                                "unexpected: extra.weight"));
}
