#include "vescale/generate/generate.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "vescale/common/check.h"
#include "vescale/random/philox.h"

namespace vescale::generate {

void check_sampling(const SamplingOptions& s, const std::string& who) {
  // "--top-p" on the command line, "generate: top_p" from code.
  auto name = [&](std::string field) {
    if (who == "--") std::replace(field.begin(), field.end(), '_', '-');
    return who + field;
  };
  VESCALE_CHECK(s.max_new_tokens >= 1, name("max_new_tokens"), ": must be >= 1 (got ",
                s.max_new_tokens, ")");
  VESCALE_CHECK(std::isfinite(s.temperature) && s.temperature >= 0, name("temperature"),
                ": must be >= 0 (0: greedy; got ", s.temperature, ")");
  VESCALE_CHECK(s.top_k >= 0, name("top_k"), ": must be >= 0 (0: off; got ", s.top_k, ")");
  VESCALE_CHECK(s.top_p > 0 && s.top_p <= 1, name("top_p"), ": must be in (0, 1] (1: off; got ",
                s.top_p, ")");
}

int64_t sample_token(const at::Tensor& logits, const SamplingOptions& s, int64_t position) {
  VESCALE_CHECK(logits.dim() == 1 && logits.numel() > 0, "sample_token: logits must be [vocab]");
  const auto host = logits.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* l = host.const_data_ptr<double>();
  const int64_t V = host.numel();
  if (s.temperature == 0) return std::max_element(l, l + V) - l;  // the first largest
  // Candidates, likeliest first (lower id first among equals) when top-k or top-p cut them; in
  // id order otherwise (no sort of a 128K vocabulary per token).
  std::vector<int64_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  auto likelier = [&](int64_t a, int64_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  size_t keep = ids.size();
  if (s.top_k > 0 && static_cast<size_t>(s.top_k) < keep) {
    keep = static_cast<size_t>(s.top_k);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(keep), ids.end(), likelier);
  } else if (s.top_p < 1) {
    std::sort(ids.begin(), ids.end(), likelier);
  }
  // Softmax of logits / temperature over the kept ones.
  std::vector<double> p(keep);
  double best = l[ids[0]];
  for (size_t i = 1; i < keep; ++i) best = std::max(best, l[ids[i]]);
  const double top = best / s.temperature;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp(l[ids[i]] / s.temperature - top);
  if (s.top_p < 1) {
    // The smallest prefix whose mass reaches top_p (at least one token).
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < s.top_p * sum) mass += p[n++];
    keep = std::max<size_t>(n, 1);
    sum = std::accumulate(p.begin(), p.begin() + static_cast<long>(keep), 0.0);
  }
  // A uniform in [0, 1) with 53 bits from Philox block `position` under the seed.
  const auto block = random::philox_block(s.seed, static_cast<uint64_t>(position));
  const uint64_t bits = (static_cast<uint64_t>(block.v[0]) << 21) ^ (block.v[1] >> 11);
  const double u = static_cast<double>(bits & ((1ULL << 53) - 1)) * 0x1p-53 * sum;
  double c = 0;
  for (size_t i = 0; i < keep; ++i)
    if ((c += p[i]) > u) return ids[i];
  return ids[keep - 1];  // rounding left u at the very top
}

std::vector<int64_t> generate(const Model& model, const models::ModelOptions& options,
                              const std::vector<int64_t>& prompt, const SamplingOptions& s,
                              const std::function<void(int64_t)>& on_token) {
  check_sampling(s, "generate: ");
  VESCALE_CHECK(model.forward_cached, "generate: model.type '", options.type(),
                "' has no KV cache (Model::forward_cached)");
  const int64_t max_len = options.max_seq_len(), n = static_cast<int64_t>(prompt.size());
  VESCALE_CHECK(n >= 1, "generate: the prompt is empty; give at least one token");
  VESCALE_CHECK(n < max_len, "generate: the prompt has ", n, " tokens, the model's max_seq_len is ",
                max_len, "; shorten the prompt to leave room for new tokens");
  for (int64_t t : prompt)
    VESCALE_CHECK(t >= 0 && t < options.vocab_size(), "generate: prompt token ", t,
                  " is outside the model's vocabulary [0, ", options.vocab_size(), ")");
  const int64_t steps = std::min(s.max_new_tokens, max_len - n);
  const std::set<int64_t> stop(s.stop_ids.begin(), s.stop_ids.end());

  c10::NoGradGuard no_grad;
  const bool was_training = model.module->is_training();
  model.module->eval();
  at::Device device = at::kCPU;
  for (const auto& p : model.module->parameters()) {
    device = p.device();
    break;
  }
  models::KVCache cache(options.n_layers(), max_len);
  auto tokens = at::tensor(prompt, at::TensorOptions().dtype(at::kLong)).view({1, n}).to(device);
  std::vector<int64_t> out;
  try {
    auto logits = model.forward_cached(tokens, cache).select(1, n - 1).squeeze(0);
    for (int64_t i = 0; i < steps; ++i) {
      const int64_t token = sample_token(logits.to(at::kFloat), s, n + i);
      out.push_back(token);
      if (on_token) on_token(token);
      if (stop.count(token) || i + 1 == steps) break;
      auto next = at::full({1, 1}, token, at::TensorOptions().dtype(at::kLong).device(device));
      logits = model.forward_cached(next, cache).select(1, 0).squeeze(0);
    }
  } catch (...) {
    model.module->train(was_training);
    throw;
  }
  model.module->train(was_training);
  return out;
}

}  // namespace vescale::generate
