// Text generation on one process, the inference layer: the prompt in one forward (prefill),
// then one token per forward through the model's KV cache (Model::forward_cached), each picked
// from the logits by sample_token. vescale-generate and train.sample_every call it
// (docs/generate.md); the models come from train/load_model.h or any registry build.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "vescale/models/model.h"
#include "vescale/models/registry.h"

namespace vescale::generate {

using Model = models::Model;

struct SamplingOptions {
  int64_t max_new_tokens = 200;  // fewer when the model's max_seq_len comes first
  double temperature = 1.0;      // 0: greedy (the first largest logit)
  int64_t top_k = 0;             // keep the k likeliest tokens; 0: all
  double top_p = 1.0;            // keep the likeliest tokens whose mass reaches p; 1: all
  uint64_t seed = 1;
  std::vector<int64_t> stop_ids;  // generation ends after one of these (end of text)
};

// Checks the options; throws naming the field (`who` prefixes it: "--top-p", "train.sample_*").
void check_sampling(const SamplingOptions& s, const std::string& who);

// One token from logits [vocab] for the token at `position` of the sequence: temperature, then
// top-k, then top-p (Hugging Face's order), then the inverse CDF at a Philox uniform keyed by
// (seed, position) over the kept tokens (likeliest first, ties to the lower id, when top-k or
// top-p cut; in id order when nothing is cut), all in double on the host. So the same logits
// give the same token on any machine and thread count.
int64_t sample_token(const at::Tensor& logits, const SamplingOptions& s, int64_t position);

// The new tokens after `prompt` (1 to max_seq_len - 1 tokens). `on_token` sees each as it is
// made (streaming output). The model runs in eval mode without autograd (restored after).
std::vector<int64_t> generate(const Model& model, const models::ModelOptions& options,
                              const std::vector<int64_t>& prompt, const SamplingOptions& s,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace vescale::generate
