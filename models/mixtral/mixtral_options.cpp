// model.type "mixtral": MixtralOptions as model.* fields, and their checks.
#include "vescale/models/mixtral/mixtral_options.h"

#include <memory>

#include "vescale/models/shared/attention_options.h"
#include "vescale/models/shared/hf_config.h"
#include "vescale/models/shared/moe_options.h"

namespace vescale::models {
namespace {

template <class V>
void visit(V& v, MixtralOptions& c) {
  visit_attention(v, c.llama);
  visit_moe(v, c.moe, /*with_normalize=*/false);  // Mixtral always renormalizes
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
    validate_attention(fail, value.llama);
    validate_moe(fail, value.moe);
  }
  int64_t vocab_size() const override { return value.llama.vocab_size; }
  int64_t max_seq_len() const override { return value.llama.max_seq_len; }
  int64_t n_layers() const override { return value.llama.n_layers; }
  int64_t dim() const override { return value.llama.dim; }
  int64_t n_heads() const override { return value.llama.n_heads; }
};

const bool registered =
    (register_family({"mixtral", [] { return std::make_unique<MixtralModelOptions>(); },
                      mixtral_fields_from_hf,
                      [](const ModelOptions& o, const std::string& dtype) {
                        return mixtral_config_to_hf(o.as<MixtralOptions>(), dtype);
                      }}),
     true);

}  // namespace
}  // namespace vescale::models
