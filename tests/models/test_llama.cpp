// LLaMA-3 in plain libtorch: parameter counts of the real 8B / 70B shapes (built on the meta
// device), attention against a plain repeat-kv softmax attention, RoPE and the llama3 scaling
// against hand-computed rotations and frequencies, RMSNorm, causality, init, and overfitting.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <numbers>

#include "vescale/models/llama/llama.h"
#include "vescale/models/shared/meta_device.h"

using vescale::models::Llama;
using vescale::models::LlamaOptions;

namespace {
LlamaOptions tiny() {
  return LlamaOptions{.vocab_size = 64,
                      .dim = 32,
                      .n_layers = 2,
                      .n_heads = 4,
                      .n_kv_heads = 2,
                      .ffn_dim = 48,
                      .norm_eps = 1e-5,
                      .rope_theta = 10000.0,
                      .max_seq_len = 16};
}
bool has_name(torch::nn::Module& m, const std::string& name) {
  auto names = m.named_parameters().keys();
  return std::find(names.begin(), names.end(), name) != names.end();
}
}  // namespace

TEST_CASE("LLaMA-3 8B and 70B parameter counts, from the formula and from meta-device models",
          "[models]") {
  // Hand-computed: 8B = 2 x 128256 x 4096 + 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336
  // + 2 x 4096) + 4096; 70B likewise with 8192 / 80 / 1024 (8 kv heads x 128) / 28672.
  CHECK(vescale::models::llama_parameter_count(vescale::models::llama3_8b()) == 8030261248);
  CHECK(vescale::models::llama_parameter_count(vescale::models::llama3_70b()) == 70553706496);

  for (const auto& o : {vescale::models::llama3_8b(), vescale::models::llama3_70b()}) {
    Llama model{nullptr};
    {
      vescale::models::MetaDeviceScope meta;
      model = Llama(o);
    }
    CHECK(vescale::models::count_parameters(*model) == vescale::models::llama_parameter_count(o));
    for (auto& p : model->parameters()) CHECK(p.is_meta());
    CHECK(model->rope_cos.is_meta());
    auto params = model->named_parameters();
    CHECK(params["layers.0.attention.wk.weight"].sizes() == c10::IntArrayRef({8 * 128, o.dim}));
    CHECK(params["layers.1.feed_forward.w2.weight"].sizes() ==
          c10::IntArrayRef({o.dim, o.ffn_dim}));
    CHECK(params["output.weight"].sizes() == c10::IntArrayRef({128256, o.dim}));
  }
  // After the scope, tensors are ordinary again.
  CHECK(!at::zeros({2}).is_meta());
}

TEST_CASE("a tiny LLaMA has Meta/TorchTitan names and the counted parameters, tied or not",
          "[models]") {
  auto o = tiny();
  Llama untied(o);
  CHECK(vescale::models::count_parameters(*untied) == vescale::models::llama_parameter_count(o));
  for (const char* n :
       {"tok_embeddings.weight", "layers.1.attention.wq.weight", "layers.1.attention.wo.weight",
        "layers.0.feed_forward.w3.weight", "layers.0.attention_norm.weight",
        "layers.0.ffn_norm.weight", "norm.weight", "output.weight"}) {
    CHECK(has_name(*untied, n));
  }
  CHECK(!has_name(*untied, "layers.0.attention.wq.bias"));
  o.tie_embeddings = true;
  Llama tied(o);
  CHECK(!has_name(*tied, "output.weight"));
  CHECK(vescale::models::count_parameters(*tied) == vescale::models::llama_parameter_count(o));
  CHECK(vescale::models::llama_parameter_count(o) == vescale::models::llama_parameter_count(tiny()) - 64 * 32);
}

TEST_CASE("RMSNorm computes in fp32 and casts back before the weight", "[models]") {
  torch::manual_seed(1);  // fixed inputs: the reference rounds in double, the model in fp32
  vescale::models::RMSNorm norm(8, 1e-6);
  torch::NoGradGuard ng;
  norm->weight.copy_(at::linspace(0.5, 2.0, 8));
  auto x = at::randn({3, 8}).to(at::kBFloat16);
  auto y = norm->forward(x);
  CHECK(y.scalar_type() == at::kBFloat16);
  auto xd = x.to(at::kDouble);
  for (int64_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < 8; ++j) ms += std::pow(xd[r][j].item<double>(), 2) / 8;
    for (int64_t j = 0; j < 8; ++j) {
      // Normalize, round to bf16, then multiply by the weight rounded to bf16, rounded again.
      const float normed = at::scalar_tensor(xd[r][j].item<double>() / std::sqrt(ms + 1e-6))
                               .to(at::kBFloat16)
                               .item<float>();
      const float w = norm->weight[j].to(at::kBFloat16).item<float>();
      const float expect =
          at::scalar_tensor(double(normed) * double(w)).to(at::kBFloat16).item<float>();
      CHECK(y[r][j].item<float>() == expect);
    }
  }
}

TEST_CASE("RoPE rotates pair (j, j + hd/2) by position * theta^(-2j/hd)", "[models]") {
  LlamaOptions o = tiny();  // head_dim 8, theta 1e4
  auto [cos, sin] = vescale::models::rope_tables(o, at::TensorOptions());
  auto x = at::randn({1, 1, 16, 8}, at::kDouble);
  auto y = vescale::models::apply_rope(x, cos, sin);
  for (int64_t p : {0, 1, 5, 15}) {
    for (int64_t j = 0; j < 4; ++j) {
      const double angle = p * std::pow(1e4, -2.0 * j / 8);
      const double a = x[0][0][p][j].item<double>(), b = x[0][0][p][j + 4].item<double>();
      CHECK(y[0][0][p][j].item<double>() ==
            Approx(a * std::cos(angle) - b * std::sin(angle)).margin(1e-5));
      CHECK(y[0][0][p][j + 4].item<double>() ==
            Approx(b * std::cos(angle) + a * std::sin(angle)).margin(1e-5));
    }
  }
}

TEST_CASE("llama3 rope scaling matches the piecewise frequencies computed by hand", "[models]") {
  // Llama 3.1's values: factor 8, low 1, high 4, original context 8192; head_dim 128.
  LlamaOptions o = vescale::models::llama3_8b();
  o.rope_scaling = {.factor = 8,
                    .low_freq_factor = 1,
                    .high_freq_factor = 4,
                    .original_max_position_embeddings = 8192};
  auto inv = vescale::models::rope_inv_freq(o, at::TensorOptions());
  REQUIRE(inv.size(0) == 64);
  int kept = 0, slowed = 0, blended = 0;
  for (int64_t j = 0; j < 64; ++j) {
    const double f = std::pow(500000.0, -2.0 * j / 128);
    const double wavelen = 2 * std::numbers::pi / f;
    double expect;
    if (wavelen < 8192.0 / 4) {
      expect = f, ++kept;
    } else if (wavelen > 8192.0 / 1) {
      expect = f / 8, ++slowed;
    } else {
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      expect = (1 - s) * f / 8 + s * f, ++blended;
    }
    CHECK(inv[j].item<double>() == Approx(expect).epsilon(1e-5));
  }
  CHECK(kept > 0);  // every regime is exercised
  CHECK(slowed > 0);
  CHECK(blended > 0);
  // Off by default: plain theta frequencies.
  auto plain = vescale::models::rope_inv_freq(vescale::models::llama3_8b(), at::TensorOptions());
  CHECK(plain[63].item<double>() == Approx(std::pow(500000.0, -126.0 / 128)).epsilon(1e-5));
}

TEST_CASE("GQA attention equals a plain repeat-kv causal softmax attention", "[models]") {
  LlamaOptions o = tiny();  // 4 query heads, 2 kv heads, head_dim 8
  vescale::models::Attention attn(o);
  auto [cos, sin] = vescale::models::rope_tables(o, at::TensorOptions());
  const int64_t B = 2, T = 7, H = 4, KV = 2, hd = 8;
  auto x = at::randn({B, T, 32});
  auto c = cos.narrow(0, 0, T), s = sin.narrow(0, 0, T);
  auto y = attn->forward(x, c, s);

  // Reference: project, rotate with an explicit rotation, repeat each kv head for its 2 query
  // heads.
  auto rotate = [&](const at::Tensor& t) {  // t [B, n, T, hd]
    auto out = t.clone();
    for (int64_t p = 0; p < T; ++p)
      for (int64_t j = 0; j < hd / 2; ++j) {
        const double ang = p * std::pow(1e4, -2.0 * j / hd);
        auto a = t.select(2, p).select(2, j), b = t.select(2, p).select(2, j + hd / 2);
        out.select(2, p).select(2, j).copy_(a * std::cos(ang) - b * std::sin(ang));
        out.select(2, p).select(2, j + hd / 2).copy_(b * std::cos(ang) + a * std::sin(ang));
      }
    return out;
  };
  auto split = [&](const at::Tensor& t, int64_t n) {
    return t.view({B, T, n, hd}).permute({0, 2, 1, 3});
  };
  auto q = rotate(split(at::matmul(x, attn->wq->weight.t()), H));
  auto k = rotate(split(at::matmul(x, attn->wk->weight.t()), KV)).repeat_interleave(H / KV, 1);
  auto v = split(at::matmul(x, attn->wv->weight.t()), KV).repeat_interleave(H / KV, 1);
  auto scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(hd));
  auto future = at::ones({T, T}, at::kBool).triu(1);
  auto probs = at::softmax(scores.masked_fill(future, -INFINITY), -1);
  auto ref = at::matmul(at::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, T, H * hd}),
                        attn->wo->weight.t());
  CHECK(at::allclose(y, ref, 1e-5, 1e-5));
}

TEST_CASE("LLaMA is causal, and rejects sequences beyond max_seq_len", "[models]") {
  Llama model(tiny());
  auto tokens = at::randint(64, {2, 10}, at::kLong);
  auto logits = model->forward(tokens);
  CHECK(logits.sizes() == c10::IntArrayRef({2, 10, 64}));
  auto changed = tokens.clone();
  changed.index_put_({at::indexing::Slice(), 6}, (tokens.select(1, 6) + 1) % 64);
  auto logits2 = model->forward(changed);
  CHECK(at::allclose(logits.narrow(1, 0, 6), logits2.narrow(1, 0, 6)));
  CHECK(!at::allclose(logits.narrow(1, 6, 1), logits2.narrow(1, 6, 1)));
  CHECK_THROWS_WITH(model->forward(at::zeros({1, 17}, at::kLong)),
                    Catch::Matchers::Contains("exceeds max_seq_len 16"));
}

TEST_CASE("LLaMA init_weights refills the same tensors with TorchTitan's stds", "[models]") {
  LlamaOptions o = tiny();
  o.dim = 256, o.n_heads = 4, o.n_kv_heads = 4, o.ffn_dim = 512, o.n_layers = 8;
  Llama model(o);
  auto params = model->named_parameters();
  const void* wo_ptr = params["layers.3.attention.wo.weight"].data_ptr();
  {
    torch::NoGradGuard ng;
    for (auto& p : model->parameters()) p.fill_(7.0);
  }
  auto cos_before = model->rope_cos.clone();
  model->rope_cos.fill_(0);
  model->init_weights();
  CHECK(params["layers.3.attention.wo.weight"].data_ptr() == wo_ptr);  // in place
  auto std_of = [&](const char* n) { return params[n].std().item<double>(); };
  CHECK(std_of("layers.3.attention.wq.weight") == Approx(0.02).epsilon(0.02));
  CHECK(std_of("layers.3.attention.wo.weight") == Approx(0.02 / std::sqrt(16.0)).epsilon(0.02));
  CHECK(std_of("layers.5.feed_forward.w2.weight") == Approx(0.02 / std::sqrt(16.0)).epsilon(0.02));
  CHECK(std_of("tok_embeddings.weight") == Approx(1.0).epsilon(0.02));
  CHECK(std_of("output.weight") == Approx(1.0 / 16).epsilon(0.02));
  CHECK(params["layers.2.ffn_norm.weight"].equal(at::ones({256})));
  CHECK(model->rope_cos.equal(cos_before));  // the buffers are recomputed identically
}

TEST_CASE("a tiny LLaMA overfits a fixed batch", "[models]") {
  torch::manual_seed(0);
  LlamaOptions o = tiny();
  o.tie_embeddings = true;
  Llama model(o);
  auto tokens = at::randint(64, {4, 17}, at::kLong);
  auto x = tokens.narrow(1, 0, 16), y = tokens.narrow(1, 1, 16);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    auto loss = at::cross_entropy_loss(model->forward(x).reshape({-1, 64}), y.reshape({-1}));
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  CHECK(first == Approx(std::log(64.0)).margin(0.3));
  CHECK(last < 0.5);
}
