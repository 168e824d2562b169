// Hugging Face state dicts to ours and back, and a strict load_state_dict. libtorch only: the
// tensors come from any reader (vescale::checkpoint::load_safetensors reads model.safetensors).
//
//   auto hf = vescale::checkpoint::load_safetensors("llama/model.safetensors");
//   models::Llama model(opts);
//   models::load_state_dict(*model, models::llama_from_hf(hf, opts));
//
// The mappings are the tables in llama.h, mixtral.h and gpt.h (and docs/models.md). Each
// function consumes every HF key: one it does not know is an error naming it, as is a missing
// one. Tied heads: an lm_head.weight in a tied model's file must equal the embedding.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace torch::nn {
class Module;
}

namespace vescale::models {

struct LlamaOptions;
struct MixtralOptions;
struct GPTOptions;

using StateDict = std::map<std::string, at::Tensor>;  // as in models/model.h

StateDict llama_from_hf(const StateDict& hf, const LlamaOptions& o);
// Per-expert w1/w2/w3 stacked into [E, out, in].
StateDict mixtral_from_hf(const StateDict& hf, const MixtralOptions& o);
// Conv1D weights ([in, out]) transposed to Linear's [out, in]; lm_head dropped (tied to wte).
StateDict gpt2_from_hf(const StateDict& hf, const GPTOptions& o);

// Ours to Hugging Face's names and layouts, as save_pretrained writes them ("model." and
// "transformer." prefixes; no lm_head.weight for a tied head; GPT-2's Conv1D [in, out]; Mixtral's
// experts one by one). Each consumes every key of ours and needs every one the options imply;
// from_hf of the result gives back the same tensors, bit for bit.
StateDict llama_to_hf(const StateDict& ours, const LlamaOptions& o);
StateDict mixtral_to_hf(const StateDict& ours, const MixtralOptions& o);
StateDict gpt2_to_hf(const StateDict& ours, const GPTOptions& o);

// Meta's original LLaMA checkpoints rotate interleaved pairs (2j, 2j+1); we (and HF) rotate
// (j, j + head_dim/2). This reorders the rows of a Meta wq or wk ([n_heads * head_dim, dim])
// within each head so our RoPE gives the same attention.
at::Tensor permute_interleaved_rope(const at::Tensor& w, int64_t n_heads);

// Copies `sd` into the module's parameters (in place, under no_grad; dtypes convert). Every
// parameter must be present and every key must be a parameter with the same shape; otherwise
// throws one error listing the missing keys, the unexpected keys and the shape mismatches.
// Buffers are not loaded: the models' buffers (rope tables) are functions of their options.
void load_state_dict(torch::nn::Module& module, const StateDict& sd);

}  // namespace vescale::models
