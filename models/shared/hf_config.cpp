#include "vescale/models/shared/hf_config.h"
#include "vescale/models/shared/hf_config_json.h"

#include <nlohmann/json.hpp>

#include "vescale/models/gpt/gpt_options.h"
#include "vescale/models/llama/llama_options.h"
#include "vescale/models/mixtral/mixtral_options.h"
#include "vescale/common/check.h"

namespace vescale::models {

json parse_hf_config(const std::string& text, const std::string& where,
                     const std::vector<std::string>& types) {
  json c;
  try {
    c = json::parse(text);
  } catch (const json::exception& e) {
    VESCALE_FAIL("model.init_from: ", where, " is not valid JSON: ", e.what());
  }
  VESCALE_CHECK(c.is_object(), "model.init_from: ", where, " is not a JSON object");
  const std::string type = c.value("model_type", "");
  bool ok = false;
  std::string list;
  for (const auto& t : types) ok |= type == t, list += (list.empty() ? "" : " or ") + t;
  VESCALE_CHECK(ok, "model.init_from: ", where, " has model_type '", type, "', not ", list,
                "; set model.type to the family of the weights");
  return c;
}

const json& hf_need(const json& c, const char* key, const std::string& where) {
  VESCALE_CHECK(c.contains(key) && !c[key].is_null(), "model.init_from: ", where, " lacks '", key,
                "'");
  return c[key];
}

void trunk_fields_from_hf(const json& c, const std::string& where, HfConfigFields& out,
                          bool scaling) {
  auto put = [&](const char* ours, const char* theirs) {
    out.emplace_back(ours, hf_need(c, theirs, where).dump());
  };
  put("vocab_size", "vocab_size");
  put("dim", "hidden_size");
  put("n_layers", "num_hidden_layers");
  put("n_heads", "num_attention_heads");
  out.emplace_back("n_kv_heads",
                   c.value("num_key_value_heads", hf_need(c, "num_attention_heads", where)).dump());
  put("ffn_dim", "intermediate_size");
  put("norm_eps", "rms_norm_eps");
  put("max_seq_len", "max_position_embeddings");
  out.emplace_back("tie_embeddings", json(c.value("tie_word_embeddings", false)).dump());
  const json rope =
      c.contains("rope_parameters") && c["rope_parameters"].is_object()
          ? c["rope_parameters"]
          : (c.contains("rope_scaling") && c["rope_scaling"].is_object() ? c["rope_scaling"]
                                                                         : json::object());
  const json theta =
      c.contains("rope_theta") ? c["rope_theta"] : rope.value("rope_theta", json(10000.0));
  out.emplace_back("rope_theta", theta.dump());
  if (!scaling) return;
  const std::string kind = rope.value("rope_type", rope.value("type", std::string("default")));
  if (kind == "llama3") {
    for (const char* k :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      out.emplace_back(std::string("rope_scaling.") + k,
                       hf_need(rope, k, where + " (rope scaling)").dump());
  } else {
    VESCALE_CHECK(kind == "default", "model.init_from: ", where, ": rope type '", kind,
                  "' is not supported (default and llama3 are)");
    out.emplace_back("rope_scaling.factor", "0");
  }
}

HfConfigFields llama_fields_from_hf(const std::string& text, const std::string& where) {
  const json c = parse_hf_config(text, where, {"llama"});
  HfConfigFields out;
  trunk_fields_from_hf(c, where, out, /*scaling=*/true);
  return out;
}

HfConfigFields mixtral_fields_from_hf(const std::string& text, const std::string& where) {
  const json c = parse_hf_config(text, where, {"mixtral"});
  HfConfigFields out;
  trunk_fields_from_hf(c, where, out, /*scaling=*/false);
  out.emplace_back("n_experts", hf_need(c, "num_local_experts", where).dump());
  out.emplace_back("top_k", hf_need(c, "num_experts_per_tok", where).dump());
  return out;
}

HfConfigFields gpt2_fields_from_hf(const std::string& text, const std::string& where) {
  const json c = parse_hf_config(text, where, {"gpt2"});
  HfConfigFields out;
  for (auto [ours, theirs] : {std::pair{"vocab_size", "vocab_size"},
                              {"n_positions", "n_positions"},
                              {"n_embd", "n_embd"},
                              {"n_layer", "n_layer"},
                              {"n_head", "n_head"},
                              {"layer_norm_eps", "layer_norm_epsilon"}})
    out.emplace_back(ours, hf_need(c, theirs, where).dump());
  return out;
}

json trunk_config_to_hf(const LlamaOptions& o, const char* arch, const char* type,
                        const std::string& dtype) {
  json rope = nullptr;
  if (o.rope_scaling.factor > 0)
    rope = {{"rope_type", "llama3"},
            {"factor", o.rope_scaling.factor},
            {"low_freq_factor", o.rope_scaling.low_freq_factor},
            {"high_freq_factor", o.rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", o.rope_scaling.original_max_position_embeddings}};
  return {{"architectures", {arch}},
          {"model_type", type},
          {"vocab_size", o.vocab_size},
          {"hidden_size", o.dim},
          {"intermediate_size", o.ffn_dim},
          {"num_hidden_layers", o.n_layers},
          {"num_attention_heads", o.n_heads},
          {"num_key_value_heads", o.n_kv_heads},
          {"head_dim", o.dim / o.n_heads},
          {"hidden_act", "silu"},
          {"rms_norm_eps", o.norm_eps},
          {"max_position_embeddings", o.max_seq_len},
          {"rope_theta", o.rope_theta},
          {"rope_scaling", rope},
          {"tie_word_embeddings", o.tie_embeddings},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"torch_dtype", dtype},
          {"use_cache", true}};
}

std::string llama_config_to_hf(const LlamaOptions& o, const std::string& dtype) {
  json j = trunk_config_to_hf(o, "LlamaForCausalLM", "llama", dtype);
  j["mlp_bias"] = false;
  return j.dump(2);
}

std::string mixtral_config_to_hf(const MixtralOptions& o, const std::string& dtype) {
  VESCALE_CHECK(o.llama.rope_scaling.factor == 0, "vescale-convert: Mixtral with rope_scaling has no ",
                "transformers counterpart; set model.rope_scaling.factor=0");
  json j = trunk_config_to_hf(o.llama, "MixtralForCausalLM", "mixtral", dtype);
  j.erase("rope_scaling");
  j["num_local_experts"] = o.moe.n_experts;
  j["num_experts_per_tok"] = o.moe.top_k;
  j["router_aux_loss_coef"] = o.moe.aux_loss_coef;
  j["output_router_logits"] = false;
  j["sliding_window"] = nullptr;
  return j.dump(2);
}

std::string gpt2_config_to_hf(const GPTOptions& o, const std::string& dtype) {
  VESCALE_CHECK(o.bias,
                "vescale-convert: a GPT without biases (model.bias=false, nanoGPT's "
                "bias=False) has no GPT-2 counterpart in transformers");
  const json j{{"architectures", {"GPT2LMHeadModel"}},
               {"model_type", "gpt2"},
               {"vocab_size", o.vocab_size},
               {"n_positions", o.n_positions},
               {"n_ctx", o.n_positions},
               {"n_embd", o.n_embd},
               {"n_layer", o.n_layer},
               {"n_head", o.n_head},
               {"n_inner", nullptr},
               {"activation_function", "gelu_new"},
               {"layer_norm_epsilon", o.layer_norm_eps},
               {"resid_pdrop", o.dropout},
               {"embd_pdrop", o.dropout},
               {"attn_pdrop", o.dropout},
               {"tie_word_embeddings", true},
               {"torch_dtype", dtype},
               {"use_cache", true}};
  return j.dump(2);
}

}  // namespace vescale::models
