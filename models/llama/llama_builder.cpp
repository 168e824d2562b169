// model.type "llama" in the registry: the module, FLOPs, blocks, Hugging Face import, plans.
#include <torch/nn/module.h>

#include "shared/hugging_face.h"
#include "llama/llama.h"
#include "model.h"
#include "vescale/nn/module_hooks.h"

namespace models {
namespace {

Model build(const ModelOptions& options) {
  auto llama = Llama(options.as<LlamaOptions>());
  Model m;
  m.module = llama.ptr();
  m.forward = [impl = llama.ptr()](const at::Tensor& tokens) { return impl->forward(tokens); };
  m.init = [impl = llama.ptr()] { impl->init_weights(); };
  m.block_pattern = "layers.*";
  // The same calls as LlamaImpl::forward, one layer at a time.
  LlamaImpl* l = llama.get();
  m.pipeline_layers.push_back(
      {"tok_embeddings", {"tok_embeddings"}, [l](const at::Tensor& tokens) {
         return vescale::nn::call(l->tok_embeddings, tokens);
       }});
  for (size_t i = 0; i < l->layers->size(); ++i) {
    const std::string name = "layers." + std::to_string(i);
    m.pipeline_layers.push_back({name, {name}, [l, i](const at::Tensor& x) {
                                   const int64_t T = x.size(1);
                                   return vescale::nn::call(l->layers->ptr<LlamaBlockImpl>(i), x,
                                                            l->rope_cos.narrow(0, 0, T),
                                                            l->rope_sin.narrow(0, 0, T));
                                 }});
  }
  // Tied: the head is the embedding's weight, so the last stage holds a copy of it.
  std::vector<std::string> head = {"norm", l->output ? "output" : "tok_embeddings"};
  m.pipeline_layers.push_back({"output", head, [l](const at::Tensor& x) {
                                 auto h = vescale::nn::call(l->norm, x);
                                 return l->output ? vescale::nn::call(l->output, h)
                                                  : at::linear(h, l->tok_embeddings->weight);
                               }});
  return m;
}

const bool registered =
    (register_builder({
         .type = "llama",
         .build = build,
         // An untied embedding is looked up; tied, it multiplies as the head.
         .matmul_fraction =
             [](const ModelOptions& o, const std::string& name, const std::vector<int64_t>&) {
               const bool lookup =
                   name == "tok_embeddings.weight" && !o.as<LlamaOptions>().tie_embeddings;
               return lookup ? 0.0 : 1.0;
             },
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
}  // namespace models
