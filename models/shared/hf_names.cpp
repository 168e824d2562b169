#include "vescale/models/shared/hf_names.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <sstream>

namespace vescale::models {

at::Tensor HfSource::take(const std::string& key) {
  auto it = left.find(key);
  if (it == left.end()) {
    missing.push_back(key);
    return {};
  }
  auto t = it->second;
  left.erase(it);
  return t;
}

void HfSource::finish() const {
  std::ostringstream os;
  if (!missing.empty()) {
    os << " missing:";
    for (const auto& k : missing) os << " " << k;
  }
  if (!left.empty()) {
    os << " unexpected:";
    for (const auto& [k, v] : left) os << " " << k;
  }
  TORCH_CHECK(missing.empty() && left.empty(), model, " ", direction,
              ": the state dict does not match the options;", os.str(),
              ". Check the config (layers, experts, tie_word_embeddings) against the file");
}

StateDict strip_prefix(const StateDict& hf, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : hf) out[k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : k] = v;
  return out;
}

void take_tied_head(HfSource& src, const at::Tensor& embedding, const std::string& head_key) {
  auto it = src.left.find(head_key);
  if (it == src.left.end()) return;
  TORCH_CHECK(
      !embedding.defined() || it->second.equal(embedding), src.model,
      " from Hugging Face: ", head_key,
      " differs from the token embedding but the options tie them; set tie_embeddings = false");
  src.left.erase(it);
}

void add_trunk_names(HfNames& n, int64_t n_layers, bool tied) {
  n.tied = tied;
  n.one_to_one.emplace_back("tok_embeddings.weight", "embed_tokens.weight");
  n.one_to_one.emplace_back("norm.weight", "norm.weight");
  if (!tied) n.one_to_one.emplace_back("output.weight", "lm_head.weight");
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    n.one_to_one.emplace_back(l + "attention_norm.weight", l + "input_layernorm.weight");
    n.one_to_one.emplace_back(l + "ffn_norm.weight", l + "post_attention_layernorm.weight");
    for (auto [h, o] :
         {std::pair{"q_proj", "wq"}, {"k_proj", "wk"}, {"v_proj", "wv"}, {"o_proj", "wo"}})
      n.one_to_one.emplace_back(l + "attention." + o + ".weight", l + "self_attn." + h + ".weight");
  }
}

void add_mlp_names(HfNames& n, int64_t n_layers) {
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".feed_forward.",
                      hf = "layers." + std::to_string(i) + ".mlp.";
    for (auto [o, h] : {std::pair{"w1", "gate_proj"}, {"w2", "down_proj"}, {"w3", "up_proj"}})
      n.one_to_one.emplace_back(ours + o + ".weight", hf + h + ".weight");
  }
}

namespace {
// Hugging Face's full name: everything but the head lives under "model.".
std::string hf_key(const std::string& name) {
  return name == "lm_head.weight" ? name : "model." + name;
}
std::string expert_key(const StackedName& s, int64_t e) {
  return s.hf_prefix + std::to_string(e) + s.hf_suffix;
}
}  // namespace

StateDict names_from_hf(const StateDict& hf, const HfNames& names) {
  HfSource src{strip_prefix(hf, "model."), {}, names.model};
  StateDict out;
  for (const auto& [ours, theirs] : names.one_to_one) out[ours] = src.take(theirs);
  if (names.tied) take_tied_head(src, out["tok_embeddings.weight"], "lm_head.weight");
  for (const auto& s : names.stacked) {
    std::vector<at::Tensor> experts;
    for (int64_t e = 0; e < names.n_experts; ++e) {
      auto t = src.take(expert_key(s, e));
      if (t.defined()) experts.push_back(t);
    }
    if (static_cast<int64_t>(experts.size()) == names.n_experts) out[s.ours] = at::stack(experts);
  }
  src.finish();
  return out;
}

StateDict names_to_hf(const StateDict& ours, const HfNames& names) {
  HfSource src{ours, {}, names.model, "to Hugging Face"};
  StateDict out;
  for (const auto& [mine, theirs] : names.one_to_one) out[hf_key(theirs)] = src.take(mine);
  for (const auto& s : names.stacked) {
    const at::Tensor stacked = src.take(s.ours);
    if (!stacked.defined()) continue;
    TORCH_CHECK(stacked.dim() == 3 && stacked.size(0) == names.n_experts, names.model,
                " to Hugging Face: ", s.ours, " has shape ", stacked.sizes(),
                ", not [n_experts = ", names.n_experts, ", out, in]");
    for (int64_t e = 0; e < names.n_experts; ++e)
      out[hf_key(expert_key(s, e))] = stacked[e].contiguous();
  }
  src.finish();
  return out;
}

}  // namespace vescale::models
