#include "common/train_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include "vescale/dtensor/dtensor.h"
#include "vescale/parallel/grad_layout.h"

namespace vescale::testing {

std::string repo_file(const std::string& rel) { return std::string(VESCALE_SOURCE_DIR "/") + rel; }

std::map<std::string, at::Tensor> full_params(torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (auto& p : m.named_parameters()) {
    const at::Tensor& t = p.value();
    out[p.key()] = (dtensor::is_dtensor(t) ? dtensor::full_tensor(t.detach()) : t.detach()).clone();
  }
  return out;
}

at::Tensor counting_tokens(uint64_t seed, int64_t rows, int64_t seq_len, int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto start = at::randint(vocab, {rows, 1}, gen, at::kLong);
  auto stride = at::randint(1, 4, {rows, 1}, gen, at::kLong);
  return (start + stride * at::arange(seq_len + 1, at::kLong)).remainder(vocab);
}

at::Tensor model_input(const at::Tensor& full, const mesh::DeviceMesh& mesh) {
  dtensor::Placements pl(mesh.ndim(), dtensor::Replicate());
  for (int64_t d = 0; d < mesh.ndim(); ++d)
    if (mesh.dim_names()[d] == "dp" || mesh.dim_names()[d] == "ep") pl[d] = dtensor::Shard(0);
  return dtensor::distribute_tensor(full, mesh, pl);
}

plan::Plan replicate_all(const std::vector<std::string>& dims) {
  plan::Plan p(dims);
  p.shard("*", dtensor::Placements(dims.size(), dtensor::Replicate()));
  return p;
}

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.flatten(0, 1), targets.flatten(0, 1));
}

std::vector<std::string> unforeseen_gradients(const parallel::GradLayout& layout) {
  std::vector<std::string> out;
  for (const auto& p : layout.params()) {
    const at::Tensor& g = p.tensor.grad();
    if (!g.defined() || !dtensor::is_dtensor(g)) {
      out.push_back(p.name + ": no DTensor gradient");
      continue;
    }
    const auto& got = dtensor::spec_of(g).placements;
    if (got != p.grad_placements)
      out.push_back(p.name + ": " + dtensor::to_string(got) + " (expected " +
                    dtensor::to_string(p.grad_placements) + ")");
  }
  return out;
}

vescale::models::LlamaOptions tiny_llama(int64_t max_seq_len) {
  vescale::models::LlamaOptions o;
  o.vocab_size = 64;
  o.dim = 64;
  o.n_layers = 2;
  o.n_heads = 8;
  o.n_kv_heads = 4;
  o.ffn_dim = 96;
  o.max_seq_len = max_seq_len;
  return o;
}

}  // namespace vescale::testing
