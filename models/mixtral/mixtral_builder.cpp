// model.type "mixtral" in the registry: the module, its aux loss, FLOPs, blocks, Hugging Face
// import, plans.
#include <torch/nn/module.h>

#include "shared/hugging_face.h"
#include "mixtral/mixtral.h"
#include "model.h"
#include "llama/llama_pipeline.h"
#include "vescale/nn/module_hooks.h"

namespace models {
namespace {

Model build(const ModelOptions& options) {
  const auto& o = options.as<MixtralOptions>();
  auto mixtral = Mixtral(o);
  Model m;
  m.module = mixtral.ptr();
  m.forward = [impl = mixtral.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
  m.forward_cached = [impl = mixtral.ptr()](const at::Tensor& tokens, KVCache& cache) {
    return impl->forward(tokens, &cache);
  };
  m.init = [impl = mixtral.ptr()] { impl->init_weights(); };
  const bool routing_loss = o.aux_loss_coef > 0 || o.router_z_loss_coef > 0;
  if (routing_loss) m.aux_loss = [impl = mixtral.ptr()] { return impl->routing_loss(); };
  m.block_pattern = "layers.*";
  m.block_side_outputs = [](torch::nn::Module& block) {
    auto* b = dynamic_cast<MixtralBlockImpl*>(&block);
    VESCALE_CHECK(
        b != nullptr,
        "activation checkpointing: a Mixtral block pattern matched a module that is not a block");
    return std::vector<at::Tensor*>{&b->feed_forward->router_logits};
  };
  // Pipeline layers: the same calls as MixtralImpl::forward, one layer at a time.
  MixtralImpl* l = mixtral.get();
  m.pipeline_layers = llama_trunk_layers(
      {.tok_embeddings = l->tok_embeddings,
       .n_layers = l->layers->size(),
       .block = [l](size_t i, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
         return vescale::nn::call(l->layers->ptr<MixtralBlockImpl>(i), x, cos, sin);
       },
       .rope_cos = &l->rope_cos,
       .rope_sin = &l->rope_sin,
       .norm = l->norm,
       .output = l->output});
  if (routing_loss) {
    m.pipeline_aux.stats = [l](const std::vector<std::string>& layers) {
      std::vector<at::Tensor> logits;
      for (const auto& name : layers)
        if (name.rfind("layers.", 0) == 0)
          logits.push_back(
              l->layers->ptr<MixtralBlockImpl>(std::stoul(name.substr(7)))->feed_forward->router_logits);
      return routing_stats(logits, l->options.n_experts, l->options.top_k);
    };
    m.pipeline_aux.loss = [l](const at::Tensor& total) {
      return routing_loss_from_stats(total, l->options);
    };
  }
  for (size_t i = 0; i < l->layers->size(); ++i) m.moe.layers.push_back("layers." + std::to_string(i));
  m.moe.n_experts = o.n_experts;
  m.moe.expert_params = "layers.*.feed_forward.experts.*";
  m.moe.take_loads = [l] {
    std::vector<at::Tensor> loads;
    for (size_t i = 0; i < l->layers->size(); ++i) {
      auto& load = l->layers->ptr<MixtralBlockImpl>(i)->feed_forward->expert_load;
      loads.push_back(load);
      load = at::Tensor();
    }
    return loads;
  };
  if (o.expert_bias_rate > 0) m.state_buffers = {"layers.*.feed_forward.expert_bias"};
  if (o.expert_bias_rate > 0)
    m.moe.update_bias = [l](const std::vector<at::Tensor>& loads) { l->update_expert_bias(loads); };
  return m;
}

const bool registered =
    (register_builder({
         .type = "mixtral",
         .build = build,
         // Stacked experts: only top_k of them run per token. An untied embedding is looked up.
         .matmul_fraction =
             [](const ModelOptions& options, const std::string& name,
                const std::vector<int64_t>& shape) {
               const auto& o = options.as<MixtralOptions>();
               if (name == "tok_embeddings.weight" && !o.tie_embeddings) return 0.0;
               if (shape.size() == 3)
                 return static_cast<double>(o.top_k) / static_cast<double>(o.n_experts);
               return 1.0;
             },
         .from_hf =
             [](const StateDict& hf, const ModelOptions& o) {
               return mixtral_from_hf(hf, o.as<MixtralOptions>());
             },
         .to_hf = [](const StateDict& ours,
                     const ModelOptions& o) { return mixtral_to_hf(ours, o.as<MixtralOptions>()); },
         .plans = {{"tp", "configs/plans/mixtral_tp.json"},
                   {"ep", "configs/plans/mixtral_ep.json"},
                   {"ep_dp", "configs/plans/mixtral_ep_dp.json"},
                   {"ep_tp", "configs/plans/mixtral_ep_tp.json"}},
     }),
     true);

}  // namespace
}  // namespace models
