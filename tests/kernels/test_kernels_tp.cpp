// The CPU kernels of vescale/kernels/ under tensor parallelism: a TP step calls the same kernel
// ops, on each rank's shards, as the step on one device, and computes the same loss.
#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <string>

#include "common/train_util.h"
#include "vescale/models/gpt/gpt.h"
#include "vescale/models/llama/llama.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/plan/parallelize.h"
#include "vescale/plan/plan.h"
#include "vescale/random/random.h"

using namespace vescale;
using namespace vescale::testing;

namespace {

// Calls of each op seen by the dispatcher's RecordFunction, on plain CPU tensors (the kernels' own
// calls) and on DTensors (the call whose rule then runs the op on the shards) apart; and the
// second dim (the heads) of the last plain call's first input.
struct OpCounts {
  std::map<std::string, int> plain, dtensor;
  std::map<std::string, int64_t> plain_dim1;
};

std::mutex g_mu;
OpCounts* g_counts = nullptr;

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_counts) return nullptr;
  const std::string name = fn.name();
  const auto inputs = fn.inputs();
  if (inputs.empty() || !inputs[0].isTensor()) return nullptr;
  const at::Tensor& t = inputs[0].toTensor();
  if (dtensor::is_dtensor(t)) {
    ++g_counts->dtensor[name];
  } else if (t.device().is_cpu()) {  // not the meta tensors of a shape probe
    ++g_counts->plain[name];
    if (t.dim() == 4) g_counts->plain_dim1[name] = t.size(1);
  }
  return nullptr;
}

// Counts the ops of fn() on every thread (backward runs on autograd's device threads).
template <class F>
OpCounts count_ops(F&& fn) {
  OpCounts counts;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_counts = &counts;
  }
  auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_op).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  fn();
  at::removeCallback(handle);
  std::lock_guard<std::mutex> lock(g_mu);
  g_counts = nullptr;
  return counts;
}

// One forward and backward; the loss as a plain double.
template <class Model>
double step(Model& model, const at::Tensor& tokens, const mesh::DeviceMesh* mesh) {
  at::Tensor x = tokens.slice(1, 0, -1).contiguous(), y = tokens.slice(1, 1).contiguous();
  if (mesh) x = model_input(x, *mesh), y = model_input(y, *mesh);
  at::Tensor loss = lm_loss(vescale::nn::call(model, x), y);
  loss.backward();
  return (dtensor::is_dtensor(loss) ? dtensor::full_tensor(loss.detach()) : loss).item<double>();
}

template <class Model, class Options>
std::pair<OpCounts, double> run(const Options& o, const char* plan_file, bool parallel) {
  random::manual_seed(7);
  Model model(o);
  std::optional<mesh::DeviceMesh> mesh;
  if (parallel) {
    mesh = mesh::DeviceMesh::init({{"tp", dist::world_size()}});
    plan::parallelize(*model, plan::Plan::from_json_file(repo_file(plan_file)), *mesh,
                      {.init = [&] { model->init_weights(); }});
  } else {
    // The same initial values as the parallel run: its init through the consistent RNG.
    auto ref_mesh = mesh::DeviceMesh::init({{"tp", dist::world_size()}});
    Model planned(o);
    plan::parallelize(*planned, plan::Plan::from_json_file(repo_file(plan_file)), ref_mesh,
                      {.init = [&] { planned->init_weights(); }});
    auto init = full_params(*planned);
    plan::remove_forward_hooks(*planned);
    torch::NoGradGuard g;
    for (auto& p : model->named_parameters()) p.value().copy_(init.at(p.key()));
  }
  const at::Tensor tokens = counting_tokens(3, 4, 16, o.vocab_size);
  double loss = 0;
  OpCounts c = count_ops([&] { loss = step(model, tokens, parallel ? &*mesh : nullptr); });
  if (parallel) plan::remove_forward_hooks(*model);
  return {c, loss};
}

}  // namespace

TEST_CASE("a TP LLaMA step runs the attention kernel on each rank's heads, as one device does",
          "[kernels][world2]") {
  const auto o = tiny_llama(16);
  const int tp = dist::world_size();
  const auto [one, one_loss] = run<vescale::models::Llama>(o, "configs/plans/llama_tp.json", false);
  const auto [par, par_loss] = run<vescale::models::Llama>(o, "configs/plans/llama_tp.json", true);
  for (const char* op :
       {"vescale::causal_attention_forward", "vescale::causal_attention_backward"}) {
    INFO(op);
    CHECK(one.plain.count(op) == 1);
    CHECK(one.plain.at(op) == o.n_layers);    // one device: a kernel call per layer
    CHECK(par.dtensor.at(op) == o.n_layers);  // TP: the DTensor call per layer...
    CHECK(par.plain.at(op) == o.n_layers);    // ...runs the same kernel on the shards
  }
  CHECK(one.plain_dim1.at("vescale::causal_attention_forward") == o.n_heads);
  CHECK(par.plain_dim1.at("vescale::causal_attention_forward") == o.n_heads / tp);  // its heads
  CHECK(one.plain.count("aten::_scaled_dot_product_flash_attention_for_cpu") == 0);
  CHECK(par.plain.count("aten::_scaled_dot_product_flash_attention_for_cpu") == 0);
  CHECK(std::abs(par_loss - one_loss) <= 1e-5 * std::abs(one_loss));
}

TEST_CASE("a TP GPT step runs the GELU, LayerNorm and packed attention kernels, as one device does",
          "[kernels][world2]") {
  vescale::models::GPTOptions o;
  o.vocab_size = 64;
  o.n_positions = 16;
  o.n_embd = 32;
  o.n_layer = 2;
  o.n_head = 4;
  o.dropout = 0.0;
  const auto [one, one_loss] = run<vescale::models::GPT>(o, "configs/plans/gpt2_tp.json", false);
  const auto [par, par_loss] = run<vescale::models::GPT>(o, "configs/plans/gpt2_tp.json", true);
  const std::map<std::string, int> per_step = {
      {"vescale::gelu_tanh_forward", o.n_layer},
      {"vescale::gelu_tanh_backward", o.n_layer},
      {"vescale::layer_norm_forward", 2 * o.n_layer + 1},
      {"vescale::layer_norm_backward", 2 * o.n_layer + 1},
      {"vescale::causal_attention_packed_forward", o.n_layer},
      {"vescale::causal_attention_packed_backward", o.n_layer}};
  for (const auto& [op, n] : per_step) {
    INFO(op);
    CHECK(one.plain.count(op) == 1);
    CHECK(one.plain.at(op) == n);
    CHECK(par.dtensor.at(op) == n);
    CHECK(par.plain.at(op) == n);
  }
  CHECK(par.plain.count("aten::gelu") == 0);
  CHECK(par.plain.count("aten::native_layer_norm") == 0);
  CHECK(std::abs(par_loss - one_loss) <= 1e-5 * std::abs(one_loss));
}
