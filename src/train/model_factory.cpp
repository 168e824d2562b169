#include "vescale/train/model_factory.h"

#include <torch/nn/module.h>

#include "gpt.h"
#include "vescale/common/check.h"

namespace vescale::train {
namespace {

models::GPTOptions gpt_options(const GptConfig& c) {
  models::GPTOptions o;
  o.vocab_size = c.vocab_size;
  o.n_positions = c.n_positions;
  o.n_embd = c.n_embd;
  o.n_layer = c.n_layer;
  o.n_head = c.n_head;
  o.dropout = c.dropout;
  o.layer_norm_eps = c.layer_norm_eps;
  return o;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  for (size_t b = 0, e; b <= s.size(); b = e + 1) {
    e = s.find('.', b);
    if (e == std::string::npos) e = s.size();
    parts.push_back(s.substr(b, e - b));
  }
  return parts;
}

ParamShapes gpt_shapes(const GptConfig& c) {
  const int64_t C = c.n_embd;
  ParamShapes s{{"wte.weight", {c.vocab_size, C}}, {"wpe.weight", {c.n_positions, C}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    s.push_back({h + "ln_1.weight", {C}});
    s.push_back({h + "ln_1.bias", {C}});
    s.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    s.push_back({h + "attn.c_attn.bias", {3 * C}});
    s.push_back({h + "attn.c_proj.weight", {C, C}});
    s.push_back({h + "attn.c_proj.bias", {C}});
    s.push_back({h + "ln_2.weight", {C}});
    s.push_back({h + "ln_2.bias", {C}});
    s.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    s.push_back({h + "mlp.c_fc.bias", {4 * C}});
    s.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    s.push_back({h + "mlp.c_proj.bias", {C}});
  }
  s.push_back({"ln_f.weight", {C}});
  s.push_back({"ln_f.bias", {C}});
  return s;
}

// LLaMA's attention and norms; `ffn` adds a layer's feed-forward parameters.
template <class C, class Ffn>
ParamShapes llama_like_shapes(const C& c, Ffn&& ffn) {
  const int64_t D = c.dim, hd = c.dim / c.n_heads;
  ParamShapes s{{"tok_embeddings.weight", {c.vocab_size, D}}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    s.push_back({l + "attention_norm.weight", {D}});
    s.push_back({l + "attention.wq.weight", {c.n_heads * hd, D}});
    s.push_back({l + "attention.wk.weight", {c.n_kv_heads * hd, D}});
    s.push_back({l + "attention.wv.weight", {c.n_kv_heads * hd, D}});
    s.push_back({l + "attention.wo.weight", {D, c.n_heads * hd}});
    s.push_back({l + "ffn_norm.weight", {D}});
    ffn(s, l);
  }
  s.push_back({"norm.weight", {D}});
  if (!c.tie_embeddings) s.push_back({"output.weight", {c.vocab_size, D}});
  return s;
}

}  // namespace

bool component_match(const std::string& pattern, const std::string& fqn) {
  const auto p = split(pattern), f = split(fqn);
  if (p.size() != f.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != "*" && p[i] != f[i]) return false;
  return true;
}

ParamShapes parameter_shapes(const ModelConfig& config) {
  if (config.type == "gpt") return gpt_shapes(config.gpt);
  if (config.type == "llama") {
    const auto& c = config.llama;
    return llama_like_shapes(c, [&](ParamShapes& s, const std::string& l) {
      s.push_back({l + "feed_forward.w1.weight", {c.ffn_dim, c.dim}});
      s.push_back({l + "feed_forward.w2.weight", {c.dim, c.ffn_dim}});
      s.push_back({l + "feed_forward.w3.weight", {c.ffn_dim, c.dim}});
    });
  }
  const auto& c = config.mixtral;
  return llama_like_shapes(c, [&](ParamShapes& s, const std::string& l) {
    s.push_back({l + "feed_forward.router.weight", {c.n_experts, c.dim}});
    s.push_back({l + "feed_forward.w1", {c.n_experts, c.ffn_dim, c.dim}});
    s.push_back({l + "feed_forward.w2", {c.n_experts, c.dim, c.ffn_dim}});
    s.push_back({l + "feed_forward.w3", {c.n_experts, c.ffn_dim, c.dim}});
  });
}

int64_t parameter_count(const ParamShapes& shapes) {
  int64_t n = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    n += k;
  }
  return n;
}

double flops_per_token(const ModelConfig& config, int64_t seq_len) {
  double matmul = 0;
  int64_t layers = 0, dim = 0;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    if (shape.size() < 2) continue;                                      // norms and biases: no matmul
    if (name == "wpe.weight" || name == "tok_embeddings.weight") continue;  // lookups only
    double k = 1;
    for (int64_t d : shape) k *= static_cast<double>(d);
    if (config.type == "mixtral" && shape.size() == 3)                   // only top_k experts run
      k *= static_cast<double>(config.mixtral.top_k) / static_cast<double>(config.mixtral.n_experts);
    matmul += k;
  }
  if (config.type == "gpt") {
    layers = config.gpt.n_layer, dim = config.gpt.n_embd;
    // The tied head multiplies with wte, which the lookup skip above left out.
    matmul += static_cast<double>(config.gpt.vocab_size * config.gpt.n_embd);
  } else if (config.type == "llama") {
    layers = config.llama.n_layers, dim = config.llama.dim;
    if (config.llama.tie_embeddings) matmul += static_cast<double>(config.llama.vocab_size * dim);
  } else {
    layers = config.mixtral.n_layers, dim = config.mixtral.dim;
    if (config.mixtral.tie_embeddings) matmul += static_cast<double>(config.mixtral.vocab_size * dim);
  }
  return 6.0 * matmul + 12.0 * static_cast<double>(layers * dim * seq_len);
}

Model build_model(const ModelConfig& config) {
  Model m;
  if (config.type == "gpt") {
    auto gpt = models::GPT(gpt_options(config.gpt));
    m.module = gpt.ptr();
    m.forward = [impl = gpt.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
    m.block_pattern = "h.*";
    return m;
  }
  VESCALE_FAIL("model.type '", config.type, "': this build has no ", config.type,
               " model yet (models/ lands it); use model.type gpt, or --dry-run for parameter counts");
}

}  // namespace vescale::train
