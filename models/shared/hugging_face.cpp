#include "vescale/models/shared/hugging_face.h"

#include "vescale/models/gpt/gpt.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/models/shared/hf_names.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <set>
#include <sstream>
#include <vector>

namespace vescale::models {
namespace {
HfNames llama_names(const LlamaOptions& o) {
  HfNames n{.model = "Llama"};
  add_trunk_names(n, o.n_layers, o.tie_embeddings);
  add_mlp_names(n, o.n_layers);
  return n;
}

HfNames mixtral_names(const MixtralOptions& o) {
  HfNames n{.model = "Mixtral", .n_experts = o.moe.n_experts};
  add_trunk_names(n, o.llama.n_layers, o.llama.tie_embeddings);
  for (int64_t i = 0; i < o.llama.n_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".feed_forward.",
                      hf = "layers." + std::to_string(i) + ".block_sparse_moe.";
    n.one_to_one.emplace_back(ours + "router.weight", hf + "gate.weight");
    for (const char* w : {"w1", "w2", "w3"})
      n.stacked.push_back({ours + "experts." + w, hf + "experts.", std::string(".") + w + ".weight"});
  }
  return n;
}
}  // namespace

StateDict llama_from_hf(const StateDict& hf, const LlamaOptions& o) {
  return names_from_hf(hf, llama_names(o));
}

StateDict mixtral_from_hf(const StateDict& hf, const MixtralOptions& o) {
  return names_from_hf(hf, mixtral_names(o));
}

StateDict gpt2_from_hf(const StateDict& hf, const GPTOptions& o) {
  HfSource src{strip_prefix(hf, "transformer."), {}, "GPT-2"};
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
  return names_to_hf(ours, llama_names(o));
}

StateDict mixtral_to_hf(const StateDict& ours, const MixtralOptions& o) {
  return names_to_hf(ours, mixtral_names(o));
}

StateDict gpt2_to_hf(const StateDict& ours, const GPTOptions& o) {
  HfSource src{ours, {}, "GPT-2", "to Hugging Face"};
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

}  // namespace vescale::models
