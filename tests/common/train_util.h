// Helpers shared by the multi-rank training-equivalence tests (plans, gradient reduction).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vescale/models/llama/llama.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace torch::nn {
class Module;
}
namespace vescale::parallel {
class GradLayout;
}

namespace vescale::testing {

// A file of this repository by its path from the root.
std::string repo_file(const std::string& rel);
// Every parameter as a full plain tensor (DTensors gathered), by name.
std::map<std::string, at::Tensor> full_params(torch::nn::Module& m);
// [rows, seq_len + 1] tokens, the same on every rank for the same seed: each row counts up by a
// per-row stride from a random start, so there is something to learn.
at::Tensor counting_tokens(uint64_t seed, int64_t rows, int64_t seq_len, int64_t vocab);
// This rank's part of a batch every rank holds: rows split over the data dims ("dp", "ep").
at::Tensor model_input(const at::Tensor& full, const mesh::DeviceMesh& mesh);
// A plan that replicates every parameter over these mesh dims.
plan::Plan replicate_all(const std::vector<std::string>& dims);
// The tiny LLaMA the multi-rank tests share: GQA with 8 query and 4 kv heads, so tp=4 still
// splits whole kv heads.
vescale::models::LlamaOptions tiny_llama(int64_t max_seq_len);
// Next-token cross-entropy of logits [B, T, V] against targets [B, T].
at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets);
// After a backward (no reduction yet): "<name>: <arrived> (expected <layout's>)" for every
// parameter of `layout` whose gradient arrived in other placements than the layout expects.
std::vector<std::string> unforeseen_gradients(const parallel::GradLayout& layout);

}  // namespace vescale::testing
