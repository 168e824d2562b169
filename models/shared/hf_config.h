// A Hugging Face config.json as model.* fields (the options half: plain C++, no libtorch):
// each family's mapping from transformers' names (hidden_size, num_hidden_layers, ...) to ours,
// as (field, JSON value) pairs such as ("dim", "64"), for model.from_hf_config and for the check
// that a config agrees with the weights it loads (docs/models.md).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace vescale::models {

using HfConfigFields = std::vector<std::pair<std::string, std::string>>;

// `text` is the config.json, `where` its path for errors. Each throws naming the key it needs
// when the file lacks one, and the model_type when it is another family's.
HfConfigFields llama_fields_from_hf(const std::string& text, const std::string& where);
HfConfigFields mixtral_fields_from_hf(const std::string& text, const std::string& where);
HfConfigFields gpt2_fields_from_hf(const std::string& text, const std::string& where);

struct LlamaOptions;
struct MixtralOptions;
struct GPTOptions;

// The other way: a config.json for transformers (and vLLM) describing a model with these options,
// its weights stored as `torch_dtype` ("float32", "bfloat16"). GPT without biases (nanoGPT's
// bias=False) has no GPT-2 counterpart: an error.
std::string llama_config_to_hf(const LlamaOptions& o, const std::string& torch_dtype);
std::string mixtral_config_to_hf(const MixtralOptions& o, const std::string& torch_dtype);
std::string gpt2_config_to_hf(const GPTOptions& o, const std::string& torch_dtype);

}  // namespace vescale::models
