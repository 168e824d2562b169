// model.type "qwen3" and "qwen3_moe": their options as model.* fields, their checks, and
// transformers' config.json both ways.
#include "vescale/models/qwen3/qwen3_options.h"

#include <memory>
#include <string>

#include "vescale/common/check.h"
#include "vescale/models/shared/attention_options.h"
#include "vescale/models/shared/hf_config_json.h"
#include "vescale/models/shared/moe_options.h"

namespace vescale::models {
namespace {

template <class V>
void visit(V& v, Qwen3Options& c) {
  visit_attention(v, c.llama);
  v.field("head_dim", c.head_dim);
  v.field("attention_bias", c.attention_bias);
}

template <class V>
void visit(V& v, Qwen3MoeOptions& c) {
  visit(v, c.qwen3);
  visit_moe(v, c.moe, /*with_normalize=*/true);
}

void validate_qwen3(const ModelOptions::Fail& fail, const Qwen3Options& c) {
  validate_attention(fail, c.llama, /*head_from_dim=*/false);
  if (!(c.head_dim >= 2 && c.head_dim % 2 == 0))
    fail("head_dim", "must be even and >= 2 (RoPE rotates pairs), got " +
                         std::to_string(c.head_dim));
  if (!(c.llama.rope_theta > 0)) fail("rope_theta", "must be > 0");
}

template <class T>
struct Qwen3ModelOptions final : OptionsImpl<T> {
  Qwen3ModelOptions(std::string type, T defaults) : OptionsImpl<T>(std::move(type), defaults) {}
  std::unique_ptr<ModelOptions> clone() const override {
    return std::make_unique<Qwen3ModelOptions>(*this);
  }
  void read(vescale::json_schema::Reader& r) override { visit(r, this->value); }
  void write(vescale::json_schema::Writer& w) const override {
    T copy = this->value;
    visit(w, copy);
  }
  void validate(const ModelOptions::Fail& fail) const override {
    if constexpr (std::is_same_v<T, Qwen3MoeOptions>) {
      validate_qwen3(fail, this->value.qwen3);
      validate_moe(fail, this->value.moe);
    } else {
      validate_qwen3(fail, this->value);
    }
  }
  const LlamaOptions& llama() const {
    if constexpr (std::is_same_v<T, Qwen3MoeOptions>)
      return this->value.qwen3.llama;
    else
      return this->value.llama;
  }
  int64_t vocab_size() const override { return llama().vocab_size; }
  int64_t max_seq_len() const override { return llama().max_seq_len; }
  int64_t n_layers() const override { return llama().n_layers; }
  int64_t dim() const override { return llama().dim; }
  int64_t n_heads() const override { return llama().n_heads; }
};

// What a Qwen3 config.json adds to the trunk's fields.
void qwen3_fields(const json& c, const std::string& where, HfConfigFields& out) {
  VESCALE_CHECK(!c.value("use_sliding_window", false), "model.init_from: ", where,
                " uses sliding-window attention, which vescale does not implement; use a ",
                "checkpoint without it");
  const json& heads = hf_need(c, "num_attention_heads", where);
  out.emplace_back("head_dim",
                   c.value("head_dim", json(hf_need(c, "hidden_size", where).get<int64_t>() /
                                            heads.get<int64_t>()))
                       .dump());
  out.emplace_back("attention_bias", json(c.value("attention_bias", false)).dump());
}

HfConfigFields qwen3_fields_from_hf(const std::string& text, const std::string& where) {
  const json c = parse_hf_config(text, where, {"qwen3"});
  HfConfigFields out;
  trunk_fields_from_hf(c, where, out, /*scaling=*/false);
  qwen3_fields(c, where, out);
  return out;
}

HfConfigFields qwen3_moe_fields_from_hf(const std::string& text, const std::string& where) {
  const json c = parse_hf_config(text, where, {"qwen3_moe"});
  VESCALE_CHECK(c.value("mlp_only_layers", json::array()).empty() &&
                    c.value("decoder_sparse_step", 1) == 1,
                "model.init_from: ", where,
                " mixes dense and MoE layers (mlp_only_layers, decoder_sparse_step), which "
                "vescale's Qwen3-MoE does not; every layer must be a MoE layer");
  HfConfigFields out;
  trunk_fields_from_hf(c, where, out, /*scaling=*/false);
  qwen3_fields(c, where, out);
  // Each expert's width is moe_intermediate_size (intermediate_size is the dense layers').
  for (auto& [field, value] : out)
    if (field == "ffn_dim") value = hf_need(c, "moe_intermediate_size", where).dump();
  const json experts = c.contains("num_experts") ? c["num_experts"] : c.value("num_local_experts", json());
  VESCALE_CHECK(!experts.is_null(), "model.init_from: ", where, " lacks 'num_experts'");
  out.emplace_back("n_experts", experts.dump());
  out.emplace_back("top_k", hf_need(c, "num_experts_per_tok", where).dump());
  out.emplace_back("normalize_top_k", json(c.value("norm_topk_prob", false)).dump());
  out.emplace_back("aux_loss_coef", json(c.value("router_aux_loss_coef", 0.001)).dump());
  return out;
}

json qwen3_config(const Qwen3Options& o, const char* arch, const char* type,
                  const std::string& dtype) {
  VESCALE_CHECK(o.llama.rope_scaling.factor == 0, "vescale-convert: Qwen3 with rope_scaling ",
                "has no transformers counterpart here; set model.rope_scaling.factor=0");
  json j = trunk_config_to_hf(o.llama, arch, type, dtype);
  j.erase("rope_scaling");
  j["head_dim"] = o.head_dim;
  j["attention_bias"] = o.attention_bias;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  return j;
}

std::string qwen3_config_to_hf(const Qwen3Options& o, const std::string& dtype) {
  return qwen3_config(o, "Qwen3ForCausalLM", "qwen3", dtype).dump(2);
}

std::string qwen3_moe_config_to_hf(const Qwen3MoeOptions& o, const std::string& dtype) {
  json j = qwen3_config(o.qwen3, "Qwen3MoeForCausalLM", "qwen3_moe", dtype);
  j["moe_intermediate_size"] = o.qwen3.llama.ffn_dim;
  j["num_experts"] = o.moe.n_experts;
  j["num_experts_per_tok"] = o.moe.top_k;
  j["norm_topk_prob"] = o.moe.normalize_top_k;
  j["router_aux_loss_coef"] = o.moe.aux_loss_coef;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = json::array();
  j["output_router_logits"] = false;
  return j.dump(2);
}

const bool registered =
    (register_family({"qwen3",
                      [] { return std::make_unique<Qwen3ModelOptions<Qwen3Options>>("qwen3", Qwen3Options{}); },
                      qwen3_fields_from_hf,
                      [](const ModelOptions& o, const std::string& dtype) {
                        return qwen3_config_to_hf(o.as<Qwen3Options>(), dtype);
                      }}),
     register_family({"qwen3_moe",
                      [] {
                        return std::make_unique<Qwen3ModelOptions<Qwen3MoeOptions>>(
                            "qwen3_moe", Qwen3MoeOptions{});
                      },
                      qwen3_moe_fields_from_hf,
                      [](const ModelOptions& o, const std::string& dtype) {
                        return qwen3_moe_config_to_hf(o.as<Qwen3MoeOptions>(), dtype);
                      }}),
     true);

}  // namespace
}  // namespace vescale::models
