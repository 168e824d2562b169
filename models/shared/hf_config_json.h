// Internal to models/: the parts of a Hugging Face config.json every LLaMA-trunk family reads
// and writes alike, for the families' own hf_config code.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "vescale/models/llama/llama_options.h"
#include "vescale/models/shared/hf_config.h"

namespace vescale::models {

using json = nlohmann::json;

// The file parsed; throws naming `where` when it is no JSON object or its model_type is none
// of `types`.
json parse_hf_config(const std::string& text, const std::string& where,
                     const std::vector<std::string>& types);
// c[key]; throws naming the key and the file when it is absent or null.
const json& hf_need(const json& c, const char* key, const std::string& where);
// The trunk's model.* fields (shared/attention_options.h) and the RoPE theta; with `scaling`,
// LLaMA 3.1's rope scaling (transformers' rope_scaling, or rope_parameters in newer versions).
void trunk_fields_from_hf(const json& c, const std::string& where, HfConfigFields& out,
                          bool scaling);
// The trunk's part of a config.json for transformers.
json trunk_config_to_hf(const LlamaOptions& o, const char* arch, const char* type,
                        const std::string& dtype);

}  // namespace vescale::models
