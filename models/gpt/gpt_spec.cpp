// model.type "gpt" in the registry: the module, FLOPs, blocks, Hugging Face import, plans.
#include <torch/nn/module.h>

#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/gpt/gpt.h"
#include "vescale/models/model.h"
#include "vescale/nn/module_hooks.h"

namespace vescale::models {
namespace {

Model build(const ModelOptions& options) {
  auto gpt = GPT(options.as<GPTOptions>());
  Model m;
  m.module = gpt.ptr();
  m.forward = [impl = gpt.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
  m.forward_cached = [impl = gpt.ptr()](const at::Tensor& tokens, KVCache& cache) {
    return impl->forward(tokens, &cache);
  };
  m.init = [impl = gpt.ptr()] { impl->init_weights(); };
  m.block_pattern = "h.*";
  // The same calls as GPTImpl::forward, one layer at a time; the head is wte (tied).
  GPTImpl* g = gpt.get();
  m.pipeline_layers.push_back({"embeddings", {"wte", "wpe", "drop"}, [g](const at::Tensor& tokens) {
                                 auto pos = at::arange(tokens.size(1), tokens.options());
                                 return vescale::nn::call(g->drop, vescale::nn::call(g->wte, tokens) +
                                                                       vescale::nn::call(g->wpe, pos));
                               }});
  for (size_t i = 0; i < g->h->size(); ++i) {
    const std::string name = "h." + std::to_string(i);
    m.pipeline_layers.push_back({name, {name}, [g, i](const at::Tensor& x) {
                                   return vescale::nn::call(g->h->ptr<GPTBlockImpl>(i), x);
                                 }});
  }
  m.pipeline_layers.push_back({"head", {"ln_f", "wte"}, [g](const at::Tensor& x) {
                                 return at::linear(vescale::nn::call(g->ln_f, x), g->wte->weight);
                               }});
  return m;
}

const bool registered =
    (register_spec({
         .type = "gpt",
         .build = build,
         // Positions are looked up; wte multiplies as the tied head.
         .matmul_fraction =
             [](const ModelOptions&, const std::string& name, const std::vector<int64_t>&) {
               return name == "wpe.weight" ? 0.0 : 1.0;
             },
         .from_hf = [](const StateDict& hf,
                       const ModelOptions& o) { return gpt2_from_hf(hf, o.as<GPTOptions>()); },
         .to_hf = [](const StateDict& ours,
                     const ModelOptions& o) { return gpt2_to_hf(ours, o.as<GPTOptions>()); },
         .plans = {{"tp", "configs/plans/gpt2_tp.json"},
                   {"tp_sp", "configs/plans/gpt2_tp_sp.json"},
                   {"dp_tp", "configs/plans/gpt2_dp_tp.json"}},
     }),
     true);

}  // namespace
}  // namespace vescale::models
