// model.type "qwen3" and "qwen3_moe" in the registry: the modules, FLOPs, blocks, the Hugging
// Face name table (both directions), the shipped plans.
#include <torch/nn/module.h>

#include <string>

#include "vescale/models/model.h"
#include "vescale/models/qwen3/qwen3.h"
#include "vescale/models/shared/hf_names.h"

namespace vescale::models {
namespace {

// The trunk's names and Qwen3's attention extras: the head norms, the biases.
HfNames qwen3_names(const Qwen3Options& o, const char* model) {
  HfNames n{.model = model};
  add_trunk_names(n, o.llama.n_layers, o.llama.tie_embeddings);
  for (int64_t i = 0; i < o.llama.n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    n.one_to_one.emplace_back(l + "attention.q_norm.weight", l + "self_attn.q_norm.weight");
    n.one_to_one.emplace_back(l + "attention.k_norm.weight", l + "self_attn.k_norm.weight");
    if (o.attention_bias)
      for (auto [h, w] :
           {std::pair{"q_proj", "wq"}, {"k_proj", "wk"}, {"v_proj", "wv"}, {"o_proj", "wo"}})
        n.one_to_one.emplace_back(l + "attention." + w + ".bias", l + "self_attn." + h + ".bias");
  }
  return n;
}

HfNames dense_names(const Qwen3Options& o) {
  HfNames n = qwen3_names(o, "Qwen3");
  add_mlp_names(n, o.llama.n_layers);
  return n;
}

HfNames moe_names(const Qwen3MoeOptions& o) {
  HfNames n = qwen3_names(o.qwen3, "Qwen3-MoE");
  n.n_experts = o.moe.n_experts;
  for (int64_t i = 0; i < o.qwen3.llama.n_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".feed_forward.",
                      hf = "layers." + std::to_string(i) + ".mlp.";
    n.one_to_one.emplace_back(ours + "router.weight", hf + "gate.weight");
    for (auto [w, h] : {std::pair{"w1", "gate_proj"}, {"w2", "down_proj"}, {"w3", "up_proj"}})
      n.stacked.push_back({ours + "experts." + w, hf + "experts.", std::string(".") + h + ".weight"});
  }
  return n;
}

// An untied embedding is looked up; tied, it multiplies as the head. Stacked experts: only
// top_k of them run per token.
double matmul_fraction(const LlamaOptions& o, const MoEOptions* moe, const std::string& name,
                       const std::vector<int64_t>& shape) {
  if (name == "tok_embeddings.weight" && !o.tie_embeddings) return 0.0;
  if (moe && shape.size() == 3)
    return static_cast<double>(moe->top_k) / static_cast<double>(moe->n_experts);
  return 1.0;
}

const bool registered =
    (register_spec({
         .type = "qwen3",
         .build =
             [](const ModelOptions& o) {
               auto model = Qwen3(o.as<Qwen3Options>());
               return trunk_model(model.ptr(), [impl = model.ptr()] { impl->init_weights(); });
             },
         .matmul_fraction =
             [](const ModelOptions& o, const std::string& name, const std::vector<int64_t>& s) {
               return matmul_fraction(o.as<Qwen3Options>().llama, nullptr, name, s);
             },
         .block_activations =
             [](const ModelOptions& o) {
               return trunk_block_activations(qwen3_trunk(o.as<Qwen3Options>()));
             },
         .from_hf =
             [](const StateDict& hf, const ModelOptions& o) {
               return names_from_hf(hf, dense_names(o.as<Qwen3Options>()));
             },
         .to_hf =
             [](const StateDict& ours, const ModelOptions& o) {
               return names_to_hf(ours, dense_names(o.as<Qwen3Options>()));
             },
         .plans = {{"tp", "configs/plans/qwen3_tp.json"}},
     }),
     register_spec({
         .type = "qwen3_moe",
         .build =
             [](const ModelOptions& o) {
               auto model = Qwen3Moe(o.as<Qwen3MoeOptions>());
               Model m = trunk_model(model.ptr(), [impl = model.ptr()] { impl->init_weights(); });
               describe_moe(m, model.get());
               return m;
             },
         .matmul_fraction =
             [](const ModelOptions& options, const std::string& name,
                const std::vector<int64_t>& s) {
               const auto& o = options.as<Qwen3MoeOptions>();
               return matmul_fraction(o.qwen3.llama, &o.moe, name, s);
             },
         .block_activations =
             [](const ModelOptions& options) {
               const auto& o = options.as<Qwen3MoeOptions>();
               return trunk_block_activations(qwen3_trunk(o.qwen3), &o.moe);
             },
         .from_hf =
             [](const StateDict& hf, const ModelOptions& o) {
               return names_from_hf(hf, moe_names(o.as<Qwen3MoeOptions>()));
             },
         .to_hf =
             [](const StateDict& ours, const ModelOptions& o) {
               return names_to_hf(ours, moe_names(o.as<Qwen3MoeOptions>()));
             },
         .plans = {{"ep", "configs/plans/qwen3_moe_ep.json"},
                   {"ep_tp", "configs/plans/qwen3_moe_ep_tp.json"}},
     }),
     true);

}  // namespace
}  // namespace vescale::models
