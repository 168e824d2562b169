// model.type "gpt": GPTOptions as model.* fields, and their checks.
#include "vescale/models/gpt/gpt_options.h"

#include <memory>

#include "vescale/models/shared/hf_config.h"

#include "vescale/models/shared/options_impl.h"

namespace vescale::models {
namespace {

template <class V>
void visit(V& v, GPTOptions& c) {
  v.field("vocab_size", c.vocab_size);
  v.field("n_positions", c.n_positions);
  v.field("n_embd", c.n_embd);
  v.field("n_layer", c.n_layer);
  v.field("n_head", c.n_head);
  v.field("dropout", c.dropout);
  v.field("layer_norm_eps", c.layer_norm_eps);
  v.field("bias", c.bias);
}

struct GptModelOptions final : OptionsImpl<GPTOptions> {
  GptModelOptions() : OptionsImpl("gpt", GPTOptions{}) {}
  std::unique_ptr<ModelOptions> clone() const override {
    return std::make_unique<GptModelOptions>(*this);
  }
  void read(vescale::json_schema::Reader& r) override { visit(r, value); }
  void write(vescale::json_schema::Writer& w) const override {
    GPTOptions copy = value;
    visit(w, copy);
  }
  void validate(const Fail& fail) const override {
    const auto& g = value;
    check_positive(fail, "vocab_size", g.vocab_size);
    check_positive(fail, "n_positions", g.n_positions);
    check_positive(fail, "n_embd", g.n_embd);
    check_positive(fail, "n_layer", g.n_layer);
    check_positive(fail, "n_head", g.n_head);
    if (g.n_embd % g.n_head != 0)
      fail("n_embd", std::to_string(g.n_embd) + " must be divisible by n_head (" +
                         std::to_string(g.n_head) + ")");
    if (!(g.dropout >= 0 && g.dropout < 1)) fail("dropout", "must be in [0, 1)");
  }
  int64_t vocab_size() const override { return value.vocab_size; }
  int64_t max_seq_len() const override { return value.n_positions; }
  int64_t n_layers() const override { return value.n_layer; }
  int64_t dim() const override { return value.n_embd; }
  int64_t n_heads() const override { return value.n_head; }
};

const bool registered = (register_family({"gpt", [] { return std::make_unique<GptModelOptions>(); },
                                          gpt2_fields_from_hf,
                                          [](const ModelOptions& o, const std::string& dtype) {
                                            return gpt2_config_to_hf(o.as<GPTOptions>(), dtype);
                                          }}),
                         true);

}  // namespace
}  // namespace vescale::models
