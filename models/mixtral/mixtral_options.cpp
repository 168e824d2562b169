// model.type "mixtral": MixtralOptions as model.* fields, and their checks.
#include "mixtral/mixtral_options.h"

#include <memory>

#include "shared/attention_options.h"
#include "shared/hf_config.h"

namespace models {
namespace {

template <class V>
void visit(V& v, MixtralOptions& c) {
  visit_attention(v, c);
  v.field("n_experts", c.n_experts);
  v.field("top_k", c.top_k);
  v.field("aux_loss_coef", c.aux_loss_coef);
  v.field("router_z_loss_coef", c.router_z_loss_coef);
  v.field("capacity_factor", c.capacity_factor);
  v.field("expert_bias_rate", c.expert_bias_rate);
}

struct MixtralModelOptions final : OptionsImpl<MixtralOptions> {
  MixtralModelOptions() : OptionsImpl("mixtral", MixtralOptions{}) {}
  std::unique_ptr<ModelOptions> clone() const override {
    return std::make_unique<MixtralModelOptions>(*this);
  }
  void read(vescale::json_schema::Reader& r) override { visit(r, value); }
  void write(vescale::json_schema::Writer& w) const override {
    MixtralOptions copy = value;
    visit(w, copy);
  }
  void validate(const Fail& fail) const override {
    validate_attention(fail, value);
    check_positive(fail, "n_experts", value.n_experts);
    if (!(value.top_k >= 1 && value.top_k <= value.n_experts))
      fail("top_k", "must be in [1, n_experts = " + std::to_string(value.n_experts) + "], got " +
                        std::to_string(value.top_k));
    if (!(value.aux_loss_coef >= 0)) fail("aux_loss_coef", "must be >= 0");
    if (!(value.router_z_loss_coef >= 0)) fail("router_z_loss_coef", "must be >= 0");
    if (!(value.capacity_factor >= 0))
      fail("capacity_factor", "must be >= 0 (0: dropless; e.g. 1.25 drops beyond 125% of even)");
    if (!(value.expert_bias_rate >= 0))
      fail("expert_bias_rate", "must be >= 0 (0: off; DeepSeek-V3 used 0.001)");
  }
  int64_t vocab_size() const override { return value.vocab_size; }
  int64_t max_seq_len() const override { return value.max_seq_len; }
  int64_t n_layers() const override { return value.n_layers; }
  int64_t dim() const override { return value.dim; }
};

const bool registered =
    (register_family({"mixtral", [] { return std::make_unique<MixtralModelOptions>(); },
                      mixtral_fields_from_hf,
                      [](const ModelOptions& o, const std::string& dtype) {
                        return mixtral_config_to_hf(o.as<MixtralOptions>(), dtype);
                      }}),
     true);

}  // namespace
}  // namespace models
