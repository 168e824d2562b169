// model.type "mixtral" in the registry: the module, its aux loss, FLOPs, blocks, Hugging Face
// import, plans.
#include <torch/nn/module.h>

#include "shared/hugging_face.h"
#include "mixtral/mixtral.h"
#include "model.h"

namespace models {
namespace {

Model build(const ModelOptions& options) {
  const auto& o = options.as<MixtralOptions>();
  auto mixtral = Mixtral(o);
  Model m;
  m.module = mixtral.ptr();
  m.forward = [impl = mixtral.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
  m.init = [impl = mixtral.ptr()] { impl->init_weights(); };
  if (o.aux_loss_coef > 0)
    m.aux_loss = [impl = mixtral.ptr(), coef = o.aux_loss_coef] { return impl->aux_loss() * coef; };
  m.block_pattern = "layers.*";
  m.block_side_outputs = [](torch::nn::Module& block) {
    auto* b = dynamic_cast<MixtralBlockImpl*>(&block);
    VESCALE_CHECK(
        b != nullptr,
        "activation checkpointing: a Mixtral block pattern matched a module that is not a block");
    return std::vector<at::Tensor*>{&b->feed_forward->router_logits};
  };
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
         .plans = {{"tp", "configs/plans/mixtral_tp.json"}},
     }),
     true);

}  // namespace
}  // namespace models
