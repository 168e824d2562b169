#include "common/hf_reference_diff.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

namespace vescale::test {

// Relative to the logits' scale (at least 1): fp32 rounding grows with the values.
HfDiffs hf_reference_diffs(const at::Tensor& logits, const std::map<std::string, at::Tensor>& ref) {
  const auto& tokens = ref.at("tokens");
  const int64_t T = tokens.size(1), V = logits.size(-1);
  auto loss = at::cross_entropy_loss(logits.narrow(1, 0, T - 1).reshape({-1, V}),
                                     tokens.narrow(1, 1, T - 1).reshape({-1}));
  const double scale = std::max(1.0, ref.at("logits").abs().max().item<double>());
  return {(logits - ref.at("logits")).abs().max().item<double>() / scale,
          (loss - ref.at("loss")).abs().item<double>()};
}

void print_hf_diffs(const std::string& name, const HfDiffs& d,
                    const std::map<std::string, at::Tensor>& ref) {
  std::printf("hf cross-check %s: max |logits diff| / scale = %.3g (logits max |x| %.3g), "
              "|loss diff| = %.3g\n",
              name.c_str(), d.logits, ref.at("logits").abs().max().item<double>(), d.loss);
}

}  // namespace vescale::test
