// model.type "mixtral" in the registry: the module, its aux loss, FLOPs, blocks, Hugging Face
// import, plans.
#include <torch/nn/module.h>

#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/models/model.h"

namespace vescale::models {
namespace {

Model build(const ModelOptions& options) {
  auto mixtral = Mixtral(options.as<MixtralOptions>());
  Model m = trunk_model(mixtral.ptr(), [impl = mixtral.ptr()] { impl->init_weights(); });
  describe_moe(m, mixtral.get());
  return m;
}

const bool registered =
    (register_spec({
         .type = "mixtral",
         .build = build,
         // Stacked experts: only top_k of them run per token. An untied embedding is looked up.
         .matmul_fraction =
             [](const ModelOptions& options, const std::string& name,
                const std::vector<int64_t>& shape) {
               const auto& o = options.as<MixtralOptions>();
               if (name == "tok_embeddings.weight" && !o.llama.tie_embeddings) return 0.0;
               if (shape.size() == 3)
                 return static_cast<double>(o.moe.top_k) / static_cast<double>(o.moe.n_experts);
               return 1.0;
             },
         .block_activations =
             [](const ModelOptions& options) {
               const auto& o = options.as<MixtralOptions>();
               return trunk_block_activations(o.llama, &o.moe);
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
}  // namespace vescale::models
