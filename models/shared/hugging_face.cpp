#include "shared/hugging_face.h"

#include "gpt/gpt.h"
#include "llama/llama.h"
#include "mixtral/mixtral.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <set>
#include <sstream>
#include <vector>

namespace models {
namespace {

// Takes HF keys out of a working copy, so that whatever is left at the end is unexpected.
struct Source {
  StateDict left;
  std::vector<std::string> missing;
  std::string model;
  const char* direction = "from Hugging Face";

  at::Tensor take(const std::string& key) {
    auto it = left.find(key);
    if (it == left.end()) {
      missing.push_back(key);
      return {};
    }
    auto t = it->second;
    left.erase(it);
    return t;
  }
  void finish() const {
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
};

// HF's files name LLaMA/Mixtral parameters under "model." (and GPT-2 under "transformer.");
// some exports drop the prefix. Accept both.
StateDict strip_prefix(const StateDict& hf, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, v] : hf) out[k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : k] = v;
  return out;
}

void take_tied_head(Source& src, const at::Tensor& embedding, const std::string& head_key) {
  auto it = src.left.find(head_key);
  if (it == src.left.end()) return;
  TORCH_CHECK(
      !embedding.defined() || it->second.equal(embedding), src.model,
      " from Hugging Face: ", head_key,
      " differs from the token embedding but the options tie them; set tie_embeddings = false");
  src.left.erase(it);
}

// The tensors that map one to one, as (our name, Hugging Face's without its "model." prefix),
// the order the names are taken in: both directions read the same table.
using Names = std::vector<std::pair<std::string, std::string>>;

// The embedding, the final norm, the head (when untied), and each layer's norms and attention:
// shared by LLaMA and Mixtral.
Names llama_common_names(int64_t n_layers, bool tied) {
  Names n{{"tok_embeddings.weight", "embed_tokens.weight"}, {"norm.weight", "norm.weight"}};
  if (!tied) n.emplace_back("output.weight", "lm_head.weight");
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    n.emplace_back(l + "attention_norm.weight", l + "input_layernorm.weight");
    n.emplace_back(l + "ffn_norm.weight", l + "post_attention_layernorm.weight");
    for (auto [h, o] :
         {std::pair{"q_proj", "wq"}, {"k_proj", "wk"}, {"v_proj", "wv"}, {"o_proj", "wo"}})
      n.emplace_back(l + "attention." + o + ".weight", l + "self_attn." + h + ".weight");
  }
  return n;
}

// LLaMA's SwiGLU MLP.
Names llama_mlp_names(int64_t n_layers) {
  Names n;
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".feed_forward.",
                      hf = "layers." + std::to_string(i) + ".mlp.";
    for (auto [o, h] : {std::pair{"w1", "gate_proj"}, {"w2", "down_proj"}, {"w3", "up_proj"}})
      n.emplace_back(ours + o + ".weight", hf + h + ".weight");
  }
  return n;
}

// Hugging Face's full name: everything but the head lives under "model.".
std::string hf_key(const std::string& name) {
  return name == "lm_head.weight" ? name : "model." + name;
}

// From Hugging Face (`src` holds its names without the prefix) or to it (`src` holds ours).
void take_from_hf(Source& src, StateDict& out, const Names& names) {
  for (const auto& [ours, hf] : names) out[ours] = src.take(hf);
}
void take_to_hf(Source& src, StateDict& out, const Names& names) {
  for (const auto& [ours, hf] : names) out[hf_key(hf)] = src.take(ours);
}

}  // namespace

StateDict llama_from_hf(const StateDict& hf, const LlamaOptions& o) {
  Source src{strip_prefix(hf, "model."), {}, "Llama"};
  StateDict out;
  take_from_hf(src, out, llama_common_names(o.n_layers, o.tie_embeddings));
  if (o.tie_embeddings) take_tied_head(src, out["tok_embeddings.weight"], "lm_head.weight");
  take_from_hf(src, out, llama_mlp_names(o.n_layers));
  src.finish();
  return out;
}

StateDict mixtral_from_hf(const StateDict& hf, const MixtralOptions& o) {
  Source src{strip_prefix(hf, "model."), {}, "Mixtral"};
  StateDict out;
  take_from_hf(src, out, llama_common_names(o.n_layers, o.tie_embeddings));
  if (o.tie_embeddings) take_tied_head(src, out["tok_embeddings.weight"], "lm_head.weight");
  for (int64_t i = 0; i < o.n_layers; ++i) {
    const std::string hf_l = "layers." + std::to_string(i) + ".block_sparse_moe.";
    const std::string ours = "layers." + std::to_string(i) + ".feed_forward.";
    out[ours + "router.weight"] = src.take(hf_l + "gate.weight");
    for (const char* w : {"w1", "w2", "w3"}) {
      std::vector<at::Tensor> experts;
      for (int64_t e = 0; e < o.n_experts; ++e) {
        auto t = src.take(hf_l + "experts." + std::to_string(e) + "." + w + ".weight");
        if (t.defined()) experts.push_back(t);
      }
      if (static_cast<int64_t>(experts.size()) == o.n_experts)
        out[ours + "experts." + w] = at::stack(experts);
    }
  }
  src.finish();
  return out;
}

StateDict gpt2_from_hf(const StateDict& hf, const GPTOptions& o) {
  Source src{strip_prefix(hf, "transformer."), {}, "GPT-2"};
  StateDict out;
  for (const char* k : {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"})
    out[k] = src.take(k);
  take_tied_head(src, out["wte.weight"], "lm_head.weight");
  for (int64_t i = 0; i < o.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      out[p + ln + ".weight"] = src.take(p + ln + ".weight");
      out[p + ln + ".bias"] = src.take(p + ln + ".bias");
    }
    for (const char* m : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
      auto w = src.take(p + m + ".weight");  // Conv1D: [in, out]
      out[p + m + ".weight"] = w.defined() ? w.t().contiguous() : w;
      out[p + m + ".bias"] = src.take(p + m + ".bias");
    }
    // Older transformers saved the causal mask as a buffer; it carries no weights.
    for (const char* buf : {"attn.bias", "attn.masked_bias"}) src.left.erase(p + buf);
  }
  src.finish();
  return out;
}

// Ours to Hugging Face ---------------------------------------------------------------------

StateDict llama_to_hf(const StateDict& ours, const LlamaOptions& o) {
  Source src{ours, {}, "Llama", "to Hugging Face"};
  StateDict out;
  take_to_hf(src, out, llama_common_names(o.n_layers, o.tie_embeddings));
  take_to_hf(src, out, llama_mlp_names(o.n_layers));
  src.finish();
  return out;
}

StateDict mixtral_to_hf(const StateDict& ours, const MixtralOptions& o) {
  Source src{ours, {}, "Mixtral", "to Hugging Face"};
  StateDict out;
  take_to_hf(src, out, llama_common_names(o.n_layers, o.tie_embeddings));
  for (int64_t i = 0; i < o.n_layers; ++i) {
    const std::string ours_l = "layers." + std::to_string(i) + ".feed_forward.";
    const std::string hf = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
    out[hf + "gate.weight"] = src.take(ours_l + "router.weight");
    for (const char* w : {"w1", "w2", "w3"}) {
      const at::Tensor stacked = src.take(ours_l + "experts." + w);
      if (!stacked.defined()) continue;
      TORCH_CHECK(stacked.dim() == 3 && stacked.size(0) == o.n_experts,
                  "Mixtral to Hugging Face: ", ours_l, "experts.", w, " has shape ",
                  stacked.sizes(), ", not [n_experts = ", o.n_experts, ", out, in]");
      for (int64_t e = 0; e < o.n_experts; ++e)
        out[hf + "experts." + std::to_string(e) + "." + w + ".weight"] = stacked[e].contiguous();
    }
  }
  src.finish();
  return out;
}

StateDict gpt2_to_hf(const StateDict& ours, const GPTOptions& o) {
  Source src{ours, {}, "GPT-2", "to Hugging Face"};
  StateDict out;
  for (const char* k : {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"})
    out[std::string("transformer.") + k] = src.take(k);
  for (int64_t i = 0; i < o.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".", hf = "transformer." + p;
    for (const char* ln : {"ln_1", "ln_2"}) {
      out[hf + ln + ".weight"] = src.take(p + ln + ".weight");
      out[hf + ln + ".bias"] = src.take(p + ln + ".bias");
    }
    for (const char* m : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
      auto w = src.take(p + m + ".weight");  // Linear: [out, in]; Conv1D: [in, out]
      out[hf + m + ".weight"] = w.defined() ? w.t().contiguous() : w;
      if (o.bias) out[hf + m + ".bias"] = src.take(p + m + ".bias");
    }
  }
  src.finish();
  return out;
}

at::Tensor permute_interleaved_rope(const at::Tensor& w, int64_t n_heads) {
  TORCH_CHECK(w.dim() == 2 && w.size(0) % (2 * n_heads) == 0,
              "permute_interleaved_rope: expected [n_heads * head_dim, dim]",
              " with an even head_dim, got ", w.sizes(), " for ", n_heads, " heads");
  const int64_t half = w.size(0) / n_heads / 2;
  // Within each head, rows (2j, 2j+1) become (j, j + head_dim/2).
  return w.view({n_heads, half, 2, w.size(1)}).transpose(1, 2).reshape({w.size(0), w.size(1)});
}

void load_state_dict(torch::nn::Module& module, const StateDict& sd) {
  auto params = module.named_parameters();
  std::vector<std::string> missing, mismatched;
  std::set<std::string> seen;
  for (const auto& item : params) {
    auto it = sd.find(item.key());
    if (it == sd.end() || !it->second.defined()) {
      missing.push_back(item.key());
    } else if (it->second.sizes() != item.value().sizes()) {
      std::ostringstream os;
      os << item.key() << " (file " << it->second.sizes() << ", model " << item.value().sizes()
         << ")";
      mismatched.push_back(os.str());
    }
    seen.insert(item.key());
  }
  std::vector<std::string> unexpected;
  for (const auto& [k, v] : sd) {
    if (!seen.count(k)) unexpected.push_back(k);
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::ostringstream os;
    auto list = [&](const char* what, const std::vector<std::string>& xs) {
      if (xs.empty()) return;
      os << " " << what << ":";
      for (const auto& x : xs) os << " " << x;
      os << ";";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("shape mismatch", mismatched);
    TORCH_CHECK(false, "load_state_dict:", os.str(),
                " check that the model options match the checkpoint");
  }
  at::NoGradGuard no_grad;
  for (auto& item : params) item.value().copy_(sd.at(item.key()));
}

}  // namespace models
