#include "vescale/models/gpt/gpt.h"

#include "vescale/kernels/attention.h"
#include "vescale/kernels/gelu.h"
#include "vescale/nn/module_hooks.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/init.h>

#include <cmath>

namespace vescale::models {

using vescale::nn::call;

GPTAttentionImpl::GPTAttentionImpl(const GPTOptions& o) : n_head(o.n_head), dropout(o.dropout) {
  TORCH_CHECK(o.n_embd % o.n_head == 0, "GPT: n_embd (", o.n_embd,
              ") must be divisible by n_head (", o.n_head, ")");
  c_attn = register_module("c_attn",
                           Linear(torch::nn::LinearOptions(o.n_embd, 3 * o.n_embd).bias(o.bias)));
  c_proj =
      register_module("c_proj", Linear(torch::nn::LinearOptions(o.n_embd, o.n_embd).bias(o.bias)));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(o.dropout));
}

torch::Tensor GPTAttentionImpl::forward(const torch::Tensor& x, KVCache* cache, int64_t layer) {
  if (!cache) {
    auto y = vescale::kernels::causal_attention_packed(call(c_attn, x), n_head,
                                                       is_training() ? dropout : 0.0);
    return call(resid_dropout, call(c_proj, y));
  }
  const int64_t B = x.size(0), T = x.size(1), offset = cache->length();
  auto qkv =
      call(c_attn, x).view({B, T, 3, n_head, -1}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, D]
  auto [k, v] = cache->append(layer, qkv[1], qkv[2]);
  auto y = cached_attention(qkv[0], k, v, offset).transpose(1, 2).reshape({B, T, -1});
  return call(resid_dropout, call(c_proj, y));
}

GPTMLPImpl::GPTMLPImpl(const GPTOptions& o) {
  c_fc = register_module("c_fc",
                         Linear(torch::nn::LinearOptions(o.n_embd, 4 * o.n_embd).bias(o.bias)));
  c_proj = register_module("c_proj",
                           Linear(torch::nn::LinearOptions(4 * o.n_embd, o.n_embd).bias(o.bias)));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout));
}

torch::Tensor GPTMLPImpl::forward(const torch::Tensor& x) {
  return call(dropout, call(c_proj, vescale::kernels::gelu_tanh(call(c_fc, x))));
}

GPTBlockImpl::GPTBlockImpl(const GPTOptions& o) {
  auto ln = [&] {
    return LayerNorm(torch::nn::LayerNormOptions({o.n_embd}).eps(o.layer_norm_eps));
  };
  ln_1 = register_module("ln_1", ln());
  attn = register_module("attn", GPTAttention(o));
  ln_2 = register_module("ln_2", ln());
  mlp = register_module("mlp", GPTMLP(o));
}

torch::Tensor GPTBlockImpl::forward(const torch::Tensor& x, KVCache* cache, int64_t layer) {
  auto h = x + call(attn, call(ln_1, x), cache, layer);
  return h + call(mlp, call(ln_2, h));
}

GPTImpl::GPTImpl(const GPTOptions& o) : options(o) {
  wte = register_module("wte", torch::nn::Embedding(o.vocab_size, o.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(o.n_positions, o.n_embd));
  drop = register_module("drop", torch::nn::Dropout(o.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.n_layer; ++i) h->push_back(GPTBlock(o));
  ln_f = register_module("ln_f",
                         LayerNorm(torch::nn::LayerNormOptions({o.n_embd}).eps(o.layer_norm_eps)));
  init_weights();
}

void GPTImpl::init_weights() {
  // GPT-2's init: N(0, 0.02) weights, zero biases, and residual projections scaled by
  // 1/sqrt(2 n_layer) so the residual stream's variance doesn't grow with depth.
  torch::NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * options.n_layer);
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      torch::nn::init::zeros_(p);
    } else if (name.find("ln_") != std::string::npos) {
      torch::nn::init::ones_(p);
    } else {
      const bool resid = name.find("c_proj.weight") != std::string::npos;
      torch::nn::init::normal_(p, 0.0, resid ? resid_std : 0.02);
    }
  }
}

torch::Tensor GPTImpl::embed(const torch::Tensor& tokens, int64_t offset) {
  auto pos = at::arange(offset, offset + tokens.size(1), tokens.options());
  return call(drop, call(wte, tokens) + call(wpe, pos));
}

torch::Tensor GPTImpl::block(size_t i, const torch::Tensor& x, KVCache* cache) {
  return call(h->ptr<GPTBlockImpl>(i), x, cache, static_cast<int64_t>(i));
}

torch::Tensor GPTImpl::head(const torch::Tensor& x) {
  return at::linear(call(ln_f, x), wte->weight);  // tied LM head
}

torch::Tensor GPTImpl::forward(const torch::Tensor& tokens, KVCache* cache) {
  const int64_t T = tokens.size(1), offset = cache ? cache->length() : 0;
  TORCH_CHECK(offset + T <= options.n_positions, "GPT: sequence length ", offset + T,
              " exceeds n_positions ", options.n_positions);
  auto x = embed(tokens, offset);
  for (size_t i = 0; i < h->size(); ++i) x = block(i, x, cache);
  if (cache) cache->advance(T);
  return head(x);
}

std::vector<Layer> GPTImpl::layer_chain() {
  GPTImpl* self = this;  // the model outlives its layers' functions (Model holds both)
  std::vector<Layer> out;
  out.push_back(
      {"embeddings", {"wte", "wpe", "drop"}, [self](const at::Tensor& tokens, const at::Tensor&) {
         return self->embed(tokens);
       }});
  for (size_t i = 0; i < h->size(); ++i) {
    const std::string name = "h." + std::to_string(i);
    out.push_back({name, {name}, [self, i](const at::Tensor& x, const at::Tensor&) {
                     return self->block(i, x);
                   }});
  }
  out.push_back({"head", {"ln_f", "wte"}, [self](const at::Tensor& x, const at::Tensor&) {
                   return self->head(x);
                 }});
  return out;
}

}  // namespace vescale::models
