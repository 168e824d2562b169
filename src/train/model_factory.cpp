#include "vescale/train/model_factory.h"

#include <torch/nn/module.h>

#include "gpt.h"
#include "llama.h"
#include "meta_device.h"
#include "mixtral.h"
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
  o.bias = c.bias;
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

models::LlamaOptions llama_options(const LlamaConfig& c) {
  models::LlamaOptions o;
  o.vocab_size = c.vocab_size;
  o.dim = c.dim;
  o.n_layers = c.n_layers;
  o.n_heads = c.n_heads;
  o.n_kv_heads = c.n_kv_heads;
  o.ffn_dim = c.ffn_dim;
  o.norm_eps = c.norm_eps;
  o.rope_theta = c.rope_theta;
  o.rope_scaling = {c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                    c.rope_scaling.high_freq_factor,
                    c.rope_scaling.original_max_position_embeddings};
  o.max_seq_len = c.max_seq_len;
  o.tie_embeddings = c.tie_embeddings;
  return o;
}

models::MixtralOptions mixtral_options(const MixtralConfig& c) {
  models::MixtralOptions o;
  o.vocab_size = c.vocab_size;
  o.dim = c.dim;
  o.n_layers = c.n_layers;
  o.n_heads = c.n_heads;
  o.n_kv_heads = c.n_kv_heads;
  o.ffn_dim = c.ffn_dim;
  o.n_experts = c.n_experts;
  o.top_k = c.top_k;
  o.norm_eps = c.norm_eps;
  o.rope_theta = c.rope_theta;
  o.max_seq_len = c.max_seq_len;
  o.tie_embeddings = c.tie_embeddings;
  return o;
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
  // Built on the meta device: the real module's names and shapes, and no memory.
  Model m;
  {
    models::MetaDeviceScope meta;
    m = build_model(config);
  }
  ParamShapes shapes;
  for (const auto& item : m.module->named_parameters())
    shapes.emplace_back(item.key(), item.value().sizes().vec());
  return shapes;
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
  // Tables used only by lookup do no multiplies: GPT's positions, and the token embedding unless
  // it is tied to the head (GPT's wte always is).
  const bool tied = config.type == "llama"
                        ? config.llama.tie_embeddings
                        : config.type == "mixtral" && config.mixtral.tie_embeddings;
  double matmul = 0;
  for (const auto& [name, shape] : parameter_shapes(config)) {
    if (shape.size() < 2) continue;  // norms and biases
    if (name == "wpe.weight" || (name == "tok_embeddings.weight" && !tied)) continue;
    double k = 1;
    for (int64_t d : shape) k *= static_cast<double>(d);
    if (config.type == "mixtral" && shape.size() == 3)  // stacked experts: only top_k of them run
      k *=
          static_cast<double>(config.mixtral.top_k) / static_cast<double>(config.mixtral.n_experts);
    matmul += k;
  }
  int64_t layers = config.gpt.n_layer, dim = config.gpt.n_embd;
  if (config.type == "llama") layers = config.llama.n_layers, dim = config.llama.dim;
  if (config.type == "mixtral") layers = config.mixtral.n_layers, dim = config.mixtral.dim;
  return 6.0 * matmul + 12.0 * static_cast<double>(layers * dim * seq_len);
}

Model build_model(const ModelConfig& config) {
  Model m;
  if (config.type == "gpt") {
    auto gpt = models::GPT(gpt_options(config.gpt));
    m.module = gpt.ptr();
    m.forward = [impl = gpt.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
    m.init = [impl = gpt.ptr()] { impl->init_weights(); };
    m.block_pattern = "h.*";
  } else if (config.type == "llama") {
    auto llama = models::Llama(llama_options(config.llama));
    m.module = llama.ptr();
    m.forward = [impl = llama.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
    m.init = [impl = llama.ptr()] { impl->init_weights(); };
    m.block_pattern = "layers.*";
  } else if (config.type == "mixtral") {
    auto mixtral = models::Mixtral(mixtral_options(config.mixtral));
    m.module = mixtral.ptr();
    m.forward = [impl = mixtral.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
    m.init = [impl = mixtral.ptr()] { impl->init_weights(); };
    if (config.mixtral.aux_loss_coef > 0)
      m.aux_loss = [impl = mixtral.ptr(), coef = config.mixtral.aux_loss_coef] {
        return impl->aux_loss() * coef;
      };
    m.block_pattern = "layers.*";
    m.block_side_outputs = [](torch::nn::Module& block) {
      auto* b = dynamic_cast<models::MixtralBlockImpl*>(&block);
      VESCALE_CHECK(
          b != nullptr,
          "activation checkpointing: a Mixtral block pattern matched a module that is not a block");
      return std::vector<at::Tensor*>{&b->feed_forward->router_logits};
    };
  } else {
    VESCALE_FAIL("model.type '", config.type, "' is not one of gpt, llama, mixtral");
  }
  return m;
}

}  // namespace vescale::train
