#include "llama/llama_pipeline.h"

#include <ATen/ATen.h>

#include <string>

#include "vescale/nn/module_hooks.h"

namespace models {

using vescale::nn::call;

std::vector<PipelineLayer> llama_trunk_layers(LlamaTrunk t) {
  std::vector<PipelineLayer> layers;
  // Module pointers, not holders: a lambda's copies are const, and forward is not.
  auto emb = t.tok_embeddings.ptr();
  auto norm = t.norm.ptr();
  auto out = t.output ? t.output.ptr() : nullptr;
  layers.push_back({"tok_embeddings", {"tok_embeddings"},
                    [emb](const at::Tensor& tokens) { return call(emb, tokens); }});
  for (size_t i = 0; i < t.n_layers; ++i) {
    const std::string name = "layers." + std::to_string(i);
    layers.push_back({name, {name}, [t, i](const at::Tensor& x) {
                        const int64_t T = x.size(1);
                        return t.block(i, x, t.rope_cos->narrow(0, 0, T), t.rope_sin->narrow(0, 0, T));
                      }});
  }
  layers.push_back({"output", {"norm", out ? "output" : "tok_embeddings"},
                    [emb, norm, out](const at::Tensor& x) {
                      auto h = call(norm, x);
                      return out ? call(out, h) : at::linear(h, emb->weight);
                    }});
  return layers;
}

}  // namespace models
