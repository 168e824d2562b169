// Internal to models/: a family's Hugging Face mapping as one table that both directions read,
// so a name can never be right one way and wrong the other. Each direction consumes every key:
// one left over is unexpected, one not found is missing, and both are listed in one error.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vescale::models {

using StateDict = std::map<std::string, at::Tensor>;  // as in models/model.h

// Per-expert Hugging Face tensors stacked into one of ours ([E, out, in]): ours, and HF's name
// of expert e as prefix + e + suffix (without "model.").
struct StackedName {
  std::string ours, hf_prefix, hf_suffix;
};

struct HfNames {
  std::string model;  // "Llama", for errors
  // (ours, Hugging Face's without its "model." prefix; "lm_head.weight" is outside it).
  std::vector<std::pair<std::string, std::string>> one_to_one = {};
  std::vector<StackedName> stacked = {};
  int64_t n_experts = 0;
  bool tied = false;  // the head is the embedding: a file's lm_head.weight must equal it
};

// Takes Hugging Face keys (or ours) out of a working copy, so that whatever is left at the end
// is unexpected; finish() throws listing the missing and the unexpected ones.
struct HfSource {
  StateDict left;
  std::vector<std::string> missing;
  std::string model;
  const char* direction = "from Hugging Face";
  at::Tensor take(const std::string& key);
  void finish() const;
};

// HF's files name LLaMA-style parameters under "model." (and GPT-2 under "transformer.");
// some exports drop the prefix. Accept both.
StateDict strip_prefix(const StateDict& hf, const std::string& prefix);
// A tied model's file may hold the head too: it must equal the embedding, and is dropped.
void take_tied_head(HfSource& src, const at::Tensor& embedding, const std::string& head_key);

// The embedding, the final norm, the head (when untied), and each layer's norms and attention
// projections: LLaMA's trunk, which Mixtral and Qwen3 share.
void add_trunk_names(HfNames& n, int64_t n_layers, bool tied);
// LLaMA's SwiGLU MLP: feed_forward.w{1,2,3} <-> mlp.{gate,down,up}_proj.
void add_mlp_names(HfNames& n, int64_t n_layers);

// Hugging Face's state dict (with or without the "model." prefix) in our names.
StateDict names_from_hf(const StateDict& hf, const HfNames& names);
// Ours in Hugging Face's names, as save_pretrained writes them ("model." prefix).
StateDict names_to_hf(const StateDict& ours, const HfNames& names);

}  // namespace vescale::models
