// model.type "llama" in the registry: the module, FLOPs, blocks, Hugging Face import, plans.
#include <torch/nn/module.h>

#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/model.h"

namespace vescale::models {
namespace {

Model build(const ModelOptions& options) {
  auto llama = Llama(options.as<LlamaOptions>());
  return trunk_model(llama.ptr(), [impl = llama.ptr()] { impl->init_weights(); });
}

const bool registered =
    (register_spec({
         .type = "llama",
         .build = build,
         // An untied embedding is looked up; tied, it multiplies as the head.
         .matmul_fraction =
             [](const ModelOptions& o, const std::string& name, const std::vector<int64_t>&) {
               const bool lookup =
                   name == "tok_embeddings.weight" && !o.as<LlamaOptions>().tie_embeddings;
               return lookup ? 0.0 : 1.0;
             },
         .block_activations =
             [](const ModelOptions& o) { return trunk_block_activations(o.as<LlamaOptions>()); },
         .from_hf = [](const StateDict& hf,
                       const ModelOptions& o) { return llama_from_hf(hf, o.as<LlamaOptions>()); },
         .to_hf = [](const StateDict& ours,
                     const ModelOptions& o) { return llama_to_hf(ours, o.as<LlamaOptions>()); },
         .plans = {{"tp", "configs/plans/llama_tp.json"},
                   {"tp_sp", "configs/plans/llama_tp_sp.json"},
                   {"dp_tp", "configs/plans/llama_dp_tp.json"},
                   {"dp_tp_sp", "configs/plans/llama_dp_tp_sp.json"}},
     }),
     true);

}  // namespace
}  // namespace vescale::models
