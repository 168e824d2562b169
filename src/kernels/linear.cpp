// linear() with a split backward (vescale/kernels/linear.h).
#include "vescale/kernels/linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/variable.h>

#include <atomic>
#include <mutex>

namespace vescale::kernels {
namespace {

std::atomic<bool> g_split{false};
std::mutex g_sink_mu;
WeightGradSink g_sink;

WeightGradSink current_sink() {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  return g_sink;
}

// .grad += g (or = g), then the hook autograd's accumulation would have run.
void accumulate(const at::Tensor& param, const at::Tensor& g) {
  at::Tensor& grad = param.mutable_grad();
  grad = grad.defined() ? grad + g : g;
  auto& hook = torch::autograd::impl::post_acc_grad_hooks(param);
  if (hook) (*hook)(param);
}

// The weight and bias, out of autograd's sight: were they inputs of the function, the engine
// would run their AccumulateGrad (and its post-accumulate hook, which marks gradient buckets
// ready) in the backward even when the gradient waits for later. Their gradients are added here.
struct Params {
  at::Tensor weight, bias;
};

struct SplitLinear : torch::autograd::Function<SplitLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const Params& p) {
    ctx->saved_data["x"] = x;
    ctx->saved_data["weight"] = p.weight;
    if (p.bias.defined()) ctx->saved_data["bias"] = p.bias;
    return at::linear(x, p.weight, p.bias.defined() ? c10::optional<at::Tensor>(p.bias) : c10::nullopt);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor g = grads[0];
    const at::Tensor x = ctx->saved_data["x"].toTensor();
    const at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor bias =
        ctx->saved_data.count("bias") ? ctx->saved_data["bias"].toTensor() : at::Tensor();
    at::Tensor gx = ctx->needs_input_grad(0) ? at::matmul(g, weight) : at::Tensor();
    const bool want_w = weight.requires_grad(), want_b = bias.defined() && bias.requires_grad();
    // [rows, out]^T [rows, in]: the weight gradient summed over every leading dim.
    WeightGradTask task = [g, x, weight, bias, want_w, want_b] {
      c10::NoGradGuard no_grad;
      const at::Tensor g2 = g.reshape({-1, g.size(-1)});
      if (want_w) accumulate(weight, at::mm(g2.t(), x.reshape({-1, x.size(-1)})));
      if (want_b) accumulate(bias, g2.sum(0));
    };
    WeightGradSink sink = current_sink();
    if (want_w || want_b) {
      if (sink)
        sink(std::move(task));
      else
        task();
    }
    return {gx, at::Tensor()};
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // Without an input that carries a gradient, this function would not be in the graph at all:
  // autograd's own linear then (the weight's gradient comes from its AccumulateGrad).
  if (!g_split.load(std::memory_order_relaxed) || !at::GradMode::is_enabled() || !x.requires_grad())
    return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
  return SplitLinear::apply(x, Params{weight, bias});
}

void set_split_weight_grad(bool on) { g_split.store(on); }
bool split_weight_grad() { return g_split.load(); }

void set_weight_grad_sink(WeightGradSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = std::move(sink);
}

}  // namespace vescale::kernels
