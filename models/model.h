// A built model as the trainer drives it, and the spec half of the registry
// (models/registry.h): what each family registers from models/<family>/<family>_spec.cpp.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vescale/models/registry.h"
#include "vescale/models/shared/kv_cache.h"

namespace torch::nn {
class Module;
}

namespace vescale::models {

using StateDict = std::map<std::string, at::Tensor>;

// One layer of the model in pipeline order, the unit a pipeline plan cuts into stages
// (docs/pipeline.md): the modules whose parameters it uses (by FQN) and its forward from the
// previous layer's output (the first layer's from the tokens; the last one returns logits).
struct Layer {
  std::string name;                  // "tok_embeddings", "layers.3", "output"
  std::vector<std::string> modules;  // "tok_embeddings"; "layers.3"; "norm", "output"
  // (input, positions): the tokens' global positions [T] (context parallelism), or undefined
  // for 0..T-1. Layers that use no position ignore them.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> forward;
};

// A loss term over all layers that is not a sum of per-layer terms (Mixtral's load balancing
// multiplies counts summed over every layer by probabilities summed over every layer). Under a
// pipeline each stage adds its layers' statistics to a running sum that travels with the
// activations, and the last stage makes the term from the total.
struct AuxOverLayers {
  // After the forward of these layers (names from Model::layers): their statistics, fp32.
  std::function<at::Tensor(const std::vector<std::string>& layers)> stats;
  std::function<at::Tensor(const at::Tensor& total)> loss;  // == aux_loss() for all layers
};

// The mixture-of-experts layers' balance (docs/moe.md): how many (token, choice) assignments
// each expert got, and the aux-loss-free expert bias that steers them.
struct MoEBalance {
  std::vector<std::string> layers;  // the MoE layers, model order ("layers.0", ...)
  int64_t n_experts = 0;
  std::string expert_params;  // FQN pattern of the experts' weights ("layers.*.experts.*")
  // Per layer, the assignments per expert ([E] fp32) of the training forwards since the last
  // call, then reset; undefined for a layer this rank did not run (another pipeline stage). On
  // DTensors they are Partial where ranks saw different tokens: the caller makes them global.
  std::function<std::vector<at::Tensor>()> take_loads;
  // Once per optimizer step with the step's global loads: the bias update (empty when off).
  std::function<void(const std::vector<at::Tensor>& loads)> update_bias;
};

struct Model {
  std::shared_ptr<torch::nn::Module> module;
  // tokens [B, T] (int64) -> logits [B, T, vocab]
  std::function<at::Tensor(const at::Tensor&)> forward;
  // tokens [B, T] at global positions [T] (int64, increasing) -> logits: position embeddings by
  // them; attention among these tokens, or over the whole sequence when a context-parallel
  // boundary sits on the attention cores (below). Empty when the family has none.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> forward_at;
  // The modules that attend over the sequence, as an FQN pattern ("layers.*.attention.core"):
  // each forward(q [B, H, T, D], k, v [B, Hkv, T, D]) -> [B, H, T, D], causal. Empty when the
  // family has none (context parallelism then refuses it).
  std::string attention_cores;
  // Generation: tokens [B, T] at positions [cache.length(), + T) -> logits [B, T, vocab]; their
  // keys and values join the cache (KVCache(n_layers, max_seq_len)), which advances by T. The
  // same weights and math as forward; training never calls it.
  std::function<at::Tensor(const at::Tensor&, KVCache&)> forward_cached;
  // Reruns the model's own initialisation in place (after parallelize made the parameters
  // DTensors, it goes through the consistent RNG).
  std::function<void()> init;
  // A loss term the model adds (Mixtral's load balancing), or an empty function.
  std::function<at::Tensor()> aux_loss;
  // The transformer blocks, as module FQN patterns with '*' matching one name component
  // ("h.*"): activation checkpointing wraps each of them.
  std::string block_pattern;
  // The tensors a block's forward leaves in its members for code after the forward that
  // needs their gradients (Mixtral's router logits, read by the aux loss): activation
  // checkpointing returns them from the checkpoint.
  std::function<std::vector<at::Tensor*>(torch::nn::Module& block)> block_side_outputs;
  // forward as a chain of layers: layers[n-1](...layers[0](tokens)) == forward(tokens). Empty
  // when the family cannot be pipelined.
  std::vector<Layer> layers;
  AuxOverLayers aux_over_layers;  // empty functions when aux_loss is empty
  MoEBalance moe;                 // empty for dense models
  // Buffers that are training state, saved in checkpoints with the parameters (FQN patterns,
  // '*' any run of characters): Mixtral's expert bias. Others (RoPE tables) are recomputed.
  std::vector<std::string> state_buffers;
};

// What the framework knows of a family beyond its options (registry.h): how to build it (the
// built Model carries its init, blocks and pipeline layers), its FLOPs, its Hugging Face name
// table in both directions, its shipped plans.
struct ModelSpec {
  std::string type;  // model.type
  // transformers' model_type when it is not `type` (GPT is transformers' "gpt2").
  std::string hf_model_type = "";
  const std::string& hf_type() const { return hf_model_type.empty() ? type : hf_model_type; }
  // Builds and initializes the model (on the CPU, or the meta device under MetaDeviceScope).
  std::function<Model(const ModelOptions&)> build;
  // The fraction of a weight's elements that multiply once per token, for FLOPs: 1 for dense
  // weights, 0 for lookup tables (untied embeddings, GPT's positions), top_k / n_experts for
  // stacked experts. Called for weights of 2 or more dims.
  std::function<double(const ModelOptions&, const std::string& name,
                       const std::vector<int64_t>& shape)>
      matmul_fraction;
  std::function<BlockActivations(const ModelOptions&)> block_activations;
  // A Hugging Face state dict in our names and layouts, and ours in Hugging Face's
  // (models/shared/hugging_face.h).
  std::function<StateDict(const StateDict& hf, const ModelOptions&)> from_hf;
  std::function<StateDict(const StateDict& ours, const ModelOptions&)> to_hf;
  // The plans shipped for this family: name -> file under the repository ("tp" ->
  // "configs/plans/llama_tp.json").
  std::vector<std::pair<std::string, std::string>> plans;
};

// Called by each family's spec file (<family>_spec.cpp) at load time.
void register_spec(ModelSpec spec);
// The spec of model.type `type`; throws naming the registered types.
const ModelSpec& spec(const std::string& type);
// The spec whose hf_type() is transformers' `model_type`, or null.
const ModelSpec* find_spec_by_hf_type(const std::string& model_type);

}  // namespace vescale::models
