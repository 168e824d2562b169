// model.type "llama": LlamaOptions as model.* fields, and their checks.
#include "vescale/models/llama/llama_options.h"

#include <memory>

#include "vescale/models/shared/attention_options.h"
#include "vescale/models/shared/hf_config.h"

namespace vescale::models {
namespace {

template <class V>
void visit(V& v, RopeScaling& c) {
  v.field("factor", c.factor);
  v.field("low_freq_factor", c.low_freq_factor);
  v.field("high_freq_factor", c.high_freq_factor);
  v.field("original_max_position_embeddings", c.original_max_position_embeddings);
}

template <class V>
void visit(V& v, LlamaOptions& c) {
  visit_attention(v, c);
  v.object("rope_scaling", [&](auto& s) { visit(s, c.rope_scaling); });
}

struct LlamaModelOptions final : OptionsImpl<LlamaOptions> {
  LlamaModelOptions() : OptionsImpl("llama", LlamaOptions{}) {}
  std::unique_ptr<ModelOptions> clone() const override {
    return std::make_unique<LlamaModelOptions>(*this);
  }
  void read(vescale::json_schema::Reader& r) override { visit(r, value); }
  void write(vescale::json_schema::Writer& w) const override {
    LlamaOptions copy = value;
    visit(w, copy);
  }
  void validate(const Fail& fail) const override {
    validate_attention(fail, value);
    if (!(value.rope_theta > 0)) fail("rope_theta", "must be > 0");
    if (!(value.rope_scaling.factor == 0 || value.rope_scaling.factor >= 1))
      fail("rope_scaling.factor", "must be 0 (off) or >= 1");
  }
  int64_t vocab_size() const override { return value.vocab_size; }
  int64_t max_seq_len() const override { return value.max_seq_len; }
  int64_t n_layers() const override { return value.n_layers; }
  int64_t dim() const override { return value.dim; }
  int64_t n_heads() const override { return value.n_heads; }
};

const bool registered =
    (register_family({"llama", [] { return std::make_unique<LlamaModelOptions>(); },
                      llama_fields_from_hf,
                      [](const ModelOptions& o, const std::string& dtype) {
                        return llama_config_to_hf(o.as<LlamaOptions>(), dtype);
                      }}),
     true);

}  // namespace
}  // namespace vescale::models
