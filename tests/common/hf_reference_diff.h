// Our logits against a transformers reference (tests/models/hf_reference.py's
// reference.safetensors: tokens, logits, loss), as every Hugging Face cross-check measures them.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace vescale::test {

struct HfDiffs {
  double logits = 0;  // max |ours - HF| over the logits / max(1, max |HF logits|)
  double loss = 0;    // |our next-token loss - HF's| (predict token t+1)
};

HfDiffs hf_reference_diffs(const at::Tensor& logits, const std::map<std::string, at::Tensor>& ref);

// One line: "hf cross-check <name>: max |logits diff| / scale = ..., |loss diff| = ...".
void print_hf_diffs(const std::string& name, const HfDiffs& d,
                    const std::map<std::string, at::Tensor>& ref);

}  // namespace vescale::test
