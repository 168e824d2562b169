#include "vescale/models/llama/transformer.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <numbers>
#include <string>
#include <tuple>

#include "vescale/kernels/attention.h"
#include "vescale/nn/module_hooks.h"

namespace vescale::models {

using vescale::nn::call;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto x32 = x.to(at::kFloat);
  auto normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

torch::Tensor rope_inv_freq(const TrunkOptions& t, const torch::TensorOptions& device) {
  const LlamaOptions& o = t.llama;
  const int64_t hd = t.head_width();
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

std::pair<torch::Tensor, torch::Tensor> rope_tables(const TrunkOptions& t,
                                                    const torch::TensorOptions& device) {
  auto f32 = device.dtype(at::kFloat);
  auto inv_freq = rope_inv_freq(t, device);
  auto angles =
      at::outer(at::arange(t.llama.max_seq_len, f32.dtype(at::kLong)).to(at::kFloat), inv_freq);
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

AttentionImpl::AttentionImpl(const TrunkOptions& t)
    : n_heads(t.llama.n_heads), n_kv_heads(t.llama.n_kv_heads), head_dim(t.head_width()) {
  const LlamaOptions& o = t.llama;
  TORCH_CHECK(t.head_dim > 0 || o.dim % o.n_heads == 0, "Llama: dim (", o.dim,
              ") must be divisible by n_heads (", o.n_heads, ")");
  TORCH_CHECK(o.n_heads % o.n_kv_heads == 0, "Llama: n_heads (", o.n_heads,
              ") must be a multiple of n_kv_heads (", o.n_kv_heads, ")");
  TORCH_CHECK(head_dim % 2 == 0, "Llama: head_dim (", head_dim, ") must be even for RoPE");
  auto linear = [&](int64_t in, int64_t out, bool bias) {
    return Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  wq = register_module("wq", linear(o.dim, n_heads * head_dim, t.qkv_bias));
  wk = register_module("wk", linear(o.dim, n_kv_heads * head_dim, t.qkv_bias));
  wv = register_module("wv", linear(o.dim, n_kv_heads * head_dim, t.qkv_bias));
  wo = register_module("wo", linear(n_heads * head_dim, o.dim, t.o_bias));
  if (t.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim, o.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim, o.norm_eps));
  }
  core = register_module("core", CausalAttention());
}

torch::Tensor CausalAttentionImpl::forward(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v) {
  // Grouped-query attention: query head h reads kv head h / (H / Hkv).
  const int64_t rep = q.size(1) / k.size(1);
  auto repeat_kv = [&](const torch::Tensor& t) {
    if (rep == 1) return t;
    const int64_t B = t.size(0), kv = t.size(1), S = t.size(2), D = t.size(3);
    return t.unsqueeze(2).expand({B, kv, rep, S, D}).reshape({B, kv * rep, S, D});
  };
  return vescale::kernels::causal_attention(q, repeat_kv(k), repeat_kv(v));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, KVCache* cache, int64_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  // -1 for the head count: under tensor parallelism the local projections hold fewer heads.
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, -1, head_dim}).transpose(1, 2); };
  // Qwen3 normalizes each head of q and k before the rotation.
  auto q = heads(call(wq, x));
  if (q_norm) q = call(q_norm, q);
  q = apply_rope(q, cos, sin);
  auto k = heads(call(wk, x));
  if (k_norm) k = call(k_norm, k);
  k = apply_rope(k, cos, sin);
  auto v = heads(call(wv, x));
  const int64_t offset = cache ? cache->length() : 0;
  if (!cache) return call(wo, call(core, q, k, v).transpose(1, 2).reshape({B, T, -1}));
  std::tie(k, v) = cache->append(layer, k, v);  // kv heads are cached, not repeats
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
  auto y = cached_attention(q, k, v, offset);
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

TransformerBlockImpl::TransformerBlockImpl(
    const TrunkOptions& t, const std::function<std::shared_ptr<FeedForwardLayer>()>& make_ff) {
  attention_norm = register_module("attention_norm", RMSNorm(t.llama.dim, t.llama.norm_eps));
  attention = register_module("attention", Attention(t));
  ffn_norm = register_module("ffn_norm", RMSNorm(t.llama.dim, t.llama.norm_eps));
  feed_forward = register_module("feed_forward", make_ff());
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                            const torch::Tensor& sin, KVCache* cache,
                                            int64_t layer) {
  auto h = x + call(attention, call(attention_norm, x), cos, sin, cache, layer);
  return h + call(feed_forward, call(ffn_norm, h));
}

InitStd llama_init_std(const LlamaOptions& o) {
  InitStd s;
  s.in = 0.02;
  s.resid = 0.02 / std::sqrt(2.0 * o.n_layers);
  s.head = 1.0 / std::sqrt(static_cast<double>(o.dim));
  s.embedding = o.tie_embeddings ? s.in : 1.0;
  return s;
}

void init_swiglu(FeedForwardLayer& ff, const InitStd& init) {
  auto* f = dynamic_cast<FeedForwardImpl*>(&ff);
  TORCH_CHECK(f != nullptr, "init_swiglu: the feed-forward is not LLaMA's SwiGLU");
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(f->w1->weight, 0.0, init.in);
  torch::nn::init::normal_(f->w2->weight, 0.0, init.resid);
  torch::nn::init::normal_(f->w3->weight, 0.0, init.resid);
}

TransformerImpl::TransformerImpl(
    const TrunkOptions& t,
    const std::function<std::shared_ptr<FeedForwardLayer>(int64_t)>& feed_forward,
    std::string family_name)
    : trunk(t), family(std::move(family_name)) {
  const LlamaOptions& o = t.llama;
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(o.vocab_size, o.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layers; ++i)
    layers->push_back(TransformerBlock(t, [&] { return feed_forward(i); }));
  norm = register_module("norm", RMSNorm(o.dim, o.norm_eps));
  if (!o.tie_embeddings) {
    output = register_module("output",
                             Linear(torch::nn::LinearOptions(o.dim, o.vocab_size).bias(false)));
  }
  // Allocated here, filled by init_trunk (on the meta device under MetaDeviceScope).
  rope_cos = register_buffer("rope_cos", torch::empty({o.max_seq_len, t.head_width()}));
  rope_sin = register_buffer("rope_sin", torch::empty({o.max_seq_len, t.head_width()}));
}

void TransformerImpl::init_trunk(
    const std::function<void(size_t, const InitStd&)>& init_feed_forward) {
  // TorchTitan's trunc_normal_ cuts at +-2 absolute (100 sigma): plain normal_ is the same
  // distribution. A tied embedding takes GPT-2's 0.02: with std 1 (or the head's) the logit of
  // the input token itself would dominate at init.
  torch::NoGradGuard no_grad;
  const auto init = llama_init_std(trunk.llama);
  torch::nn::init::normal_(tok_embeddings->weight, 0.0, init.embedding);
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& l = layer(i);
    auto& a = *l.attention;
    for (auto* w : {&a.wq->weight, &a.wk->weight, &a.wv->weight})
      torch::nn::init::normal_(*w, 0.0, init.in);
    torch::nn::init::normal_(a.wo->weight, 0.0, init.resid);
    for (auto* lin : {&a.wq, &a.wk, &a.wv, &a.wo})
      if ((*lin)->bias.defined()) torch::nn::init::zeros_((*lin)->bias);
    if (a.q_norm) {
      torch::nn::init::ones_(a.q_norm->weight);
      torch::nn::init::ones_(a.k_norm->weight);
    }
    init_feed_forward(i, init);
    torch::nn::init::ones_(l.attention_norm->weight);
    torch::nn::init::ones_(l.ffn_norm->weight);
  }
  torch::nn::init::ones_(norm->weight);
  if (output) torch::nn::init::normal_(output->weight, 0.0, init.head);
  // The rope tables: deterministic, recomputed into the existing buffers (none on meta).
  if (!rope_cos.is_meta()) {
    auto [c, s] = rope_tables(trunk, rope_cos.options());
    rope_cos.copy_(c);
    rope_sin.copy_(s);
  }
}

torch::Tensor TransformerImpl::embed(const torch::Tensor& tokens) {
  return call(tok_embeddings, tokens);
}

torch::Tensor TransformerImpl::block(size_t i, const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, KVCache* cache) {
  return call(layers->ptr<TransformerBlockImpl>(i), x, cos, sin, cache, static_cast<int64_t>(i));
}

torch::Tensor TransformerImpl::head(const torch::Tensor& x) {
  auto h = call(norm, x);
  return output ? call(output, h) : at::linear(h, tok_embeddings->weight);
}

torch::Tensor TransformerImpl::forward_at(const torch::Tensor& tokens,
                                          const torch::Tensor& positions) {
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == tokens.size(1), family,
              ": forward_at takes one position per token, got ", positions.sizes(), " for ",
              tokens.sizes());
  const auto at = positions.to(rope_cos.device());
  auto cos = rope_cos.index_select(0, at), sin = rope_sin.index_select(0, at);
  auto x = embed(tokens);
  for (size_t i = 0; i < layers->size(); ++i) x = block(i, x, cos, sin, nullptr);
  return head(x);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, KVCache* cache) {
  const int64_t T = tokens.size(1), offset = cache ? cache->length() : 0;
  TORCH_CHECK(offset + T <= trunk.llama.max_seq_len, family, ": sequence length ", offset + T,
              " exceeds max_seq_len ", trunk.llama.max_seq_len);
  auto cos = rope_cos.narrow(0, offset, T), sin = rope_sin.narrow(0, offset, T);
  auto x = embed(tokens);
  for (size_t i = 0; i < layers->size(); ++i) x = block(i, x, cos, sin, cache);
  if (cache) cache->advance(T);
  return head(x);
}

std::vector<Layer> TransformerImpl::layer_chain() {
  std::vector<Layer> out;
  // A raw pointer: the model outlives its layers' functions (Model holds both).
  TransformerImpl* self = this;
  out.push_back(
      {"tok_embeddings", {"tok_embeddings"}, [self](const at::Tensor& tokens, const at::Tensor&) {
         return self->embed(tokens);
       }});
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::string name = "layers." + std::to_string(i);
    out.push_back({name, {name}, [self, i](const at::Tensor& x, const at::Tensor& positions) {
                     if (positions.defined()) {
                       const auto at = positions.to(self->rope_cos.device());
                       return self->block(i, x, self->rope_cos.index_select(0, at),
                                          self->rope_sin.index_select(0, at));
                     }
                     const int64_t T = x.size(1);
                     return self->block(i, x, self->rope_cos.narrow(0, 0, T),
                                        self->rope_sin.narrow(0, 0, T));
                   }});
  }
  out.push_back({"output",
                 {"norm", output ? "output" : "tok_embeddings"},
                 [self](const at::Tensor& x, const at::Tensor&) { return self->head(x); }});
  return out;
}

Model trunk_model(std::shared_ptr<TransformerImpl> model, std::function<void()> init) {
  Model m;
  m.module = model;
  m.forward = [model](const at::Tensor& tokens) { return model->forward(tokens); };
  m.forward_at = [model](const at::Tensor& tokens, const at::Tensor& positions) {
    return model->forward_at(tokens, positions);
  };
  m.attention_cores = "layers.*.attention.core";
  m.forward_cached = [model](const at::Tensor& tokens, KVCache& cache) {
    return model->forward(tokens, &cache);
  };
  m.init = std::move(init);
  m.block_pattern = "layers.*";
  m.layers = model->layer_chain();
  return m;
}

BlockActivations trunk_block_activations(const TrunkOptions& o, const MoEOptions* moe) {
  const LlamaOptions& l = o.llama;
  const double dim = static_cast<double>(l.dim), heads = static_cast<double>(l.n_heads),
               kv = static_cast<double>(l.n_kv_heads), hd = static_cast<double>(o.head_width()),
               ffn = static_cast<double>(l.ffn_dim);
  BlockActivations a;
  // Each RMSNorm keeps its input and the normalized input, and its output feeds the next GEMMs.
  a.replicated = 4 * dim;
  a.gathered = 2 * dim;
  // The attention kernel keeps q and the repeated k, v and its output (which wo reads); the
  // head norms keep their inputs and normalized inputs.
  a.tensor_parallel = 4 * heads * hd + (o.qk_norm ? 2 * (heads + kv) * hd : 0);
  a.attention_heads = heads;
  // Under a split backward the projections keep about as much for W; a dense feed-forward too.
  a.split_weight_tensor_parallel = a.tensor_parallel + (moe ? 0 : 4 * ffn);
  if (moe) {
    // Per assignment: the gathered input, the expert's output and its row back in token order
    // (which the gate multiplies), three int64 indices (token, order, expert: two elements
    // each) and the SwiGLU's four intermediates; the router's logits and probabilities.
    const double k = static_cast<double>(moe->top_k), e = static_cast<double>(moe->n_experts);
    a.replicated += k * (3 * dim + 6) + 2 * e;
    a.tensor_parallel += k * 4 * ffn;
  } else {
    // w1's and w3's outputs, SiLU's output, their product (which w2 reads).
    a.tensor_parallel += 4 * ffn;
  }
  // Its backward holds the output's gradient and a feed-forward intermediate's (per
  // assignment under MoE).
  a.backward_replicated = dim;
  a.backward_tensor_parallel = ffn * (moe ? static_cast<double>(moe->top_k) : 1.0);
  return a;
}

}  // namespace vescale::models
