#include "vescale/parallel/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <mutex>

#include "vescale/nn/module_hooks.h"
#include "vescale/common/check.h"
#include "vescale/random/random.h"
#include "vescale/timeline/recorder.h"
#include "vescale/nn/block_pattern.h"
#include "vescale/random/torch_generator.h"

namespace vescale::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Everything random or precision-related that forward depended on.
struct Replay : torch::CustomClassHolder {
  BlockForward forward;
  std::vector<at::Tensor*> side;  // members forward writes; returned as extra outputs
  random::State vescale_rng;
  at::Tensor cpu_rng;  // libtorch's default CPU generator (plain-tensor dropout)
  bool autocast_cpu = false, autocast_cuda = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16, autocast_cuda_dtype = at::kBFloat16;
  std::vector<bool> needs_grad;
};

struct Autocast {
  bool cpu, cuda;
  at::ScalarType cpu_dtype, cuda_dtype;
  static Autocast current() {
    return {
        at::autocast::is_autocast_enabled(at::kCPU), at::autocast::is_autocast_enabled(at::kCUDA),
        at::autocast::get_autocast_dtype(at::kCPU), at::autocast::get_autocast_dtype(at::kCUDA)};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `inputs` as a TensorList: autograd counts each element as an input (a std::vector wouldn't be).
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Replay> replay,
                               at::TensorList input_list) {
    const variable_list inputs = input_list.vec();
    replay->vescale_rng = random::get_state();
    replay->cpu_rng = random::cpu_generator_state();
    const Autocast ac = Autocast::current();
    replay->autocast_cpu = ac.cpu, replay->autocast_cuda = ac.cuda;
    replay->autocast_cpu_dtype = ac.cpu_dtype, replay->autocast_cuda_dtype = ac.cuda_dtype;
    for (const auto& x : inputs) replay->needs_grad.push_back(x.defined() && x.requires_grad());
    ctx->save_for_backward(inputs);
    // Unused side outputs get no gradient (not zeros to backprop through).
    ctx->set_materialize_grads(false);
    // apply() already disabled grad mode: no graph is kept for the block's inside.
    variable_list outputs{replay->forward(inputs)};
    for (at::Tensor* t : replay->side) outputs.push_back(*t);
    ctx->saved_data["replay"] = at::IValue::make_capsule(std::move(replay));
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay = c10::static_intrusive_pointer_cast<Replay>(ctx->saved_data["replay"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      at::Tensor x = saved[i].defined() ? saved[i].detach() : at::Tensor();
      if (x.defined() && replay->needs_grad[i]) x.set_requires_grad(true);
      inputs.push_back(x);
    }
    // Recompute with forward's random and autocast state, then put the present state back.
    const random::State rng_now = random::get_state();
    const at::Tensor cpu_now = random::cpu_generator_state();
    const Autocast ac_now = Autocast::current();
    random::set_state(replay->vescale_rng);
    random::set_cpu_generator_state(replay->cpu_rng);
    Autocast{replay->autocast_cpu, replay->autocast_cuda, replay->autocast_cpu_dtype,
             replay->autocast_cuda_dtype}
        .apply();
    at::Tensor out;
    {
      at::AutoGradMode grad(true);
      nn::RecomputeScope recompute;
      static const uint32_t kName = timeline::intern("recompute");
      timeline::Scope span(timeline::Kind::Recompute, kName);
      out = replay->forward(inputs);
    }
    ac_now.apply();
    at::autocast::clear_cache();
    random::set_state(rng_now);
    random::set_cpu_generator_state(cpu_now);
    // Reentrant backward through the recomputed block, and through the recomputed side
    // outputs with the gradients the code after forward gave them: parameter grads accumulate
    // as usual.
    variable_list roots, grads_in;
    if (grad_outputs[0].defined() && out.requires_grad())
      roots.push_back(out), grads_in.push_back(grad_outputs[0]);
    for (size_t j = 0; j < replay->side.size(); ++j) {
      const at::Tensor& g = grad_outputs[1 + j];
      const at::Tensor& t = *replay->side[j];
      if (g.defined() && t.defined() && t.requires_grad())
        roots.push_back(t), grads_in.push_back(g);
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads_in);
    variable_list grads{at::Tensor()};  // for the Replay argument
    for (size_t i = 0; i < inputs.size(); ++i)
      grads.push_back(replay->needs_grad[i] ? inputs[i].grad() : at::Tensor());
    return grads;
  }
};

}  // namespace

at::Tensor checkpoint(const std::vector<at::Tensor>& inputs, const BlockForward& forward,
                      const std::vector<at::Tensor*>& side) {
  auto replay = c10::make_intrusive<Replay>();
  replay->forward = forward;
  replay->side = side;
  variable_list outputs = CheckpointFunction::apply(std::move(replay), at::TensorList(inputs));
  // The members now hold the outputs with the checkpoint as their grad_fn.
  for (size_t j = 0; j < side.size(); ++j) *side[j] = outputs[1 + j];
  return outputs[0];
}

std::vector<nn::HookHandle> enable_activation_checkpointing(torch::nn::Module& root,
                                                            const std::string& pattern,
                                                            const SideOutputs& side_outputs) {
  std::vector<nn::HookHandle> links;
  for (const auto& item : root.named_modules()) {
    if (!nn::block_match(pattern, item.key())) continue;
    const auto slots = nn::hook_slots(*item.value());
    VESCALE_CHECK(std::find(slots.begin(), slots.end(), nn::HookSlot::Checkpoint) == slots.end(),
                  "activation checkpointing: module '", item.key(),
                  "' is checkpointed already; enable it once");
    std::vector<at::Tensor*> side;
    if (side_outputs) side = side_outputs(*item.value());
    nn::ForwardHooks link;
    link.around = [side](const std::vector<at::Tensor>& xs, const nn::ForwardHooks::Forward& f) {
      return checkpoint(xs, f, side);
    };
    links.push_back(nn::add_forward_hook(*item.value(), nn::HookSlot::Checkpoint, std::move(link)));
  }
  VESCALE_CHECK(!links.empty(), "activation checkpointing: no module matches '", pattern,
                "' ('*' stands for one name component, like h.* for h.0, h.1, ...)");
  return links;
}

}  // namespace vescale::parallel
