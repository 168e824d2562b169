#include "llama/llama.h"

#include "vescale/kernels/attention.h"
#include "vescale/nn/module_hooks.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <numbers>
#include <tuple>

namespace models {

using vescale::nn::call;

LlamaOptions llama3_8b() {
  return LlamaOptions{.vocab_size = 128256,
                      .dim = 4096,
                      .n_layers = 32,
                      .n_heads = 32,
                      .n_kv_heads = 8,
                      .ffn_dim = 14336,
                      .norm_eps = 1e-5,
                      .rope_theta = 500000.0};
}

LlamaOptions llama3_70b() {
  return LlamaOptions{.vocab_size = 128256,
                      .dim = 8192,
                      .n_layers = 80,
                      .n_heads = 64,
                      .n_kv_heads = 8,
                      .ffn_dim = 28672,
                      .norm_eps = 1e-5,
                      .rope_theta = 500000.0};
}

int64_t llama_parameter_count(const LlamaOptions& o) {
  const int64_t hd = o.dim / o.n_heads;
  const int64_t attention =
      o.dim * o.n_heads * hd * 2 + o.dim * o.n_kv_heads * hd * 2;  // wq, wo, wk, wv
  const int64_t ffn = 3 * o.dim * o.ffn_dim;
  const int64_t layer = attention + ffn + 2 * o.dim;  // + two norms
  const int64_t embeddings = o.vocab_size * o.dim * (o.tie_embeddings ? 1 : 2);
  return embeddings + o.n_layers * layer + o.dim;  // + final norm
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto x32 = x.to(at::kFloat);
  auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

torch::Tensor rope_inv_freq(const LlamaOptions& o, const torch::TensorOptions& device) {
  const int64_t hd = o.dim / o.n_heads;
  auto f32 = device.dtype(at::kFloat);
  // 1 / theta^(2j / head_dim), in fp32 as the reference implementations compute it.
  auto inv_freq =
      1.0 / at::pow(o.rope_theta, at::arange(0, hd, 2, f32.dtype(at::kLong)).to(at::kFloat) / hd);
  const RopeScaling& s = o.rope_scaling;
  if (s.factor <= 0) return inv_freq;
  // Llama 3.1: long wavelengths (beyond the original context / low_freq_factor) are slowed by
  // `factor`, short ones (below context / high_freq_factor) kept, and the band between is a
  // linear blend in context / wavelength.
  const double ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = ctx / s.low_freq_factor;
  const double high_freq_wavelen = ctx / s.high_freq_factor;
  auto wavelen = 2 * std::numbers::pi / inv_freq;
  auto scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  auto smooth = (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, blended, scaled);
}

std::pair<torch::Tensor, torch::Tensor> rope_tables(const LlamaOptions& o,
                                                    const torch::TensorOptions& device) {
  auto f32 = device.dtype(at::kFloat);
  auto inv_freq = rope_inv_freq(o, device);
  auto angles = at::outer(at::arange(o.max_seq_len, f32.dtype(at::kLong)).to(at::kFloat), inv_freq);
  auto emb = at::cat({angles, angles}, -1);  // [T, head_dim]: both halves share a frequency
  return {emb.cos(), emb.sin()};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos,
                         const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaOptions& o)
    : n_heads(o.n_heads), n_kv_heads(o.n_kv_heads), head_dim(o.dim / o.n_heads) {
  TORCH_CHECK(o.dim % o.n_heads == 0, "Llama: dim (", o.dim, ") must be divisible by n_heads (",
              o.n_heads, ")");
  TORCH_CHECK(o.n_heads % o.n_kv_heads == 0, "Llama: n_heads (", o.n_heads,
              ") must be a multiple of n_kv_heads (", o.n_kv_heads, ")");
  TORCH_CHECK(head_dim % 2 == 0, "Llama: head_dim (", head_dim, ") must be even for RoPE");
  auto linear = [&](int64_t in, int64_t out) {
    return Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  wq = register_module("wq", linear(o.dim, n_heads * head_dim));
  wk = register_module("wk", linear(o.dim, n_kv_heads * head_dim));
  wv = register_module("wv", linear(o.dim, n_kv_heads * head_dim));
  wo = register_module("wo", linear(n_heads * head_dim, o.dim));
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                          const torch::Tensor& sin, KVCache* cache, int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  // -1 for the head count: under tensor parallelism the local projections hold fewer heads.
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, -1, head_dim}).transpose(1, 2); };
  auto q = apply_rope(heads(call(wq, x)), cos, sin);
  auto k = apply_rope(heads(call(wk, x)), cos, sin);
  auto v = heads(call(wv, x));
  const int64_t offset = cache ? cache->length() : 0;
  if (cache) std::tie(k, v) = cache->append(layer, k, v);  // kv heads are cached, not repeats
  // Grouped-query attention: query head h reads kv head h / (n_heads / n_kv_heads).
  const int64_t rep = n_heads / n_kv_heads;
  if (rep > 1) {
    auto repeat_kv = [&](const torch::Tensor& t) {
      const int64_t kv = t.size(1), S = t.size(2);
      return t.unsqueeze(2).expand({B, kv, rep, S, head_dim}).reshape({B, kv * rep, S, head_dim});
    };
    k = repeat_kv(k);
    v = repeat_kv(v);
  }
  auto y = cache ? cached_attention(q, k, v, offset) : vescale::kernels::causal_attention(q, k, v);
  return call(wo, y.transpose(1, 2).reshape({B, T, -1}));
}

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  auto linear = [&](int64_t in, int64_t out) {
    return Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  w1 = register_module("w1", linear(dim, hidden));
  w2 = register_module("w2", linear(hidden, dim));
  w3 = register_module("w3", linear(dim, hidden));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return call(w2, at::silu(call(w1, x)) * call(w3, x));
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaOptions& o) {
  attention_norm = register_module("attention_norm", RMSNorm(o.dim, o.norm_eps));
  attention = register_module("attention", LlamaAttention(o));
  ffn_norm = register_module("ffn_norm", RMSNorm(o.dim, o.norm_eps));
  feed_forward = register_module("feed_forward", FeedForward(o.dim, o.ffn_dim));
}

torch::Tensor LlamaBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                      const torch::Tensor& sin, KVCache* cache, int64_t layer) {
  auto h = x + call(attention, call(attention_norm, x), cos, sin, cache, layer);
  return h + call(feed_forward, call(ffn_norm, h));
}

LlamaImpl::LlamaImpl(const LlamaOptions& o) : options(o) {
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(o.vocab_size, o.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layers; ++i) layers->push_back(LlamaBlock(o));
  norm = register_module("norm", RMSNorm(o.dim, o.norm_eps));
  if (!o.tie_embeddings) {
    output = register_module("output",
                             Linear(torch::nn::LinearOptions(o.dim, o.vocab_size).bias(false)));
  }
  // Allocated here, filled by init_weights (on the meta device under MetaDeviceScope).
  rope_cos = register_buffer("rope_cos", torch::empty({o.max_seq_len, o.dim / o.n_heads}));
  rope_sin = register_buffer("rope_sin", torch::empty({o.max_seq_len, o.dim / o.n_heads}));
  init_weights();
}

void LlamaImpl::init_weights() {
  // TorchTitan's init: embeddings N(0, 1); wq/wk/wv and w1 N(0, 0.02); the projections into the
  // residual stream (wo, w2) and w3 N(0, 0.02 / sqrt(2 * n_layers)) so its variance doesn't grow
  // with depth; norms 1; the head N(0, dim^-1/2) so initial logits are O(1). TorchTitan's
  // trunc_normal_ cuts at +-2 absolute (100 sigma): plain normal_ is the same distribution.
  // A tied embedding takes GPT-2's 0.02: with std 1 (or the head's) the logit of the input token
  // itself would dominate at init.
  torch::NoGradGuard no_grad;
  const auto init = llama_init_std(options);
  torch::nn::init::normal_(tok_embeddings->weight, 0.0, init.embedding);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* layer = layers->ptr<LlamaBlockImpl>(i).get();
    init_attention(*layer->attention, init);
    auto& f = *layer->feed_forward;
    torch::nn::init::normal_(f.w1->weight, 0.0, init.in);
    torch::nn::init::normal_(f.w2->weight, 0.0, init.resid);
    torch::nn::init::normal_(f.w3->weight, 0.0, init.resid);
    torch::nn::init::ones_(layer->attention_norm->weight);
    torch::nn::init::ones_(layer->ffn_norm->weight);
  }
  torch::nn::init::ones_(norm->weight);
  if (output) torch::nn::init::normal_(output->weight, 0.0, init.head);
  fill_rope(options, rope_cos, rope_sin);
}

LlamaInitStd llama_init_std(const LlamaOptions& o) {
  LlamaInitStd s;
  s.in = 0.02;
  s.resid = 0.02 / std::sqrt(2.0 * o.n_layers);
  s.head = 1.0 / std::sqrt(static_cast<double>(o.dim));
  s.embedding = o.tie_embeddings ? s.in : 1.0;
  return s;
}

void init_attention(LlamaAttentionImpl& a, const LlamaInitStd& init) {
  torch::NoGradGuard no_grad;
  for (auto* w : {&a.wq->weight, &a.wk->weight, &a.wv->weight})
    torch::nn::init::normal_(*w, 0.0, init.in);
  torch::nn::init::normal_(a.wo->weight, 0.0, init.resid);
}

void fill_rope(const LlamaOptions& o, torch::Tensor& cos, torch::Tensor& sin) {
  if (cos.is_meta()) return;
  torch::NoGradGuard no_grad;
  auto [c, s] = rope_tables(o, cos.options());
  cos.copy_(c);
  sin.copy_(s);
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens, KVCache* cache) {
  const int64_t T = tokens.size(1), offset = cache ? cache->length() : 0;
  TORCH_CHECK(offset + T <= options.max_seq_len, "Llama: sequence length ", offset + T,
              " exceeds max_seq_len ", options.max_seq_len);
  auto cos = rope_cos.narrow(0, offset, T), sin = rope_sin.narrow(0, offset, T);
  auto x = call(tok_embeddings, tokens);
  for (size_t i = 0; i < layers->size(); ++i)
    x = call(layers->ptr<LlamaBlockImpl>(i), x, cos, sin, cache, static_cast<int64_t>(i));
  if (cache) cache->advance(T);
  x = call(norm, x);
  return output ? call(output, x) : at::linear(x, tok_embeddings->weight);
}

}  // namespace models
