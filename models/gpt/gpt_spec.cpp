// model.type "gpt" in the registry: the module, FLOPs, blocks, Hugging Face import, plans.
#include <torch/nn/module.h>

#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/gpt/gpt.h"
#include "vescale/models/model.h"

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
  m.layers = gpt->layer_chain();  // forward's own pieces, one layer at a time
  return m;
}

const bool registered =
    (register_spec({
         .type = "gpt",
         .hf_model_type = "gpt2",
         .build = build,
         // Positions are looked up; wte multiplies as the tied head.
         .matmul_fraction =
             [](const ModelOptions&, const std::string& name, const std::vector<int64_t>&) {
               return name == "wpe.weight" ? 0.0 : 1.0;
             },
         // Each LayerNorm keeps its input, and its output feeds the next GEMM; attention keeps
         // the packed q, k, v and its output (which c_proj reads); the MLP keeps c_fc's output
         // (GELU's input) and GELU's output (c_proj's). Dropout's masks, when on, are not counted.
         .block_activations =
             [](const ModelOptions& options) {
               const auto& o = options.as<GPTOptions>();
               const double h = static_cast<double>(o.n_embd);
               // Its backward holds the output's gradient and the MLP intermediate's.
               return BlockActivations{.replicated = 2 * h,
                                       .gathered = 2 * h,
                                       .tensor_parallel = 4 * h + 8 * h,
                                       .attention_heads = static_cast<double>(o.n_head),
                                       .backward_replicated = h,
                                       .backward_tensor_parallel = 4 * h,
                                       .split_weight_tensor_parallel = 4 * h + 8 * h};
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
