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

// The backward both variants share: grads[0] is the output's gradient; returns the input's
// gradient and, without a sink, the weight's and the bias's (else they go to the sink).
torch::autograd::variable_list split_backward(torch::autograd::AutogradContext* ctx,
                                              const at::Tensor& g, bool has_bias) {
  const at::Tensor x = ctx->saved_data["x"].toTensor();
  const at::Tensor weight = ctx->saved_data["weight"].toTensor();
  const at::Tensor bias = has_bias ? ctx->saved_data["bias"].toTensor() : at::Tensor();
  at::Tensor gx = ctx->needs_input_grad(0) ? at::matmul(g, weight) : at::Tensor();
  const bool want_w = ctx->needs_input_grad(1), want_b = has_bias && ctx->needs_input_grad(2);
  // [rows, out]^T [rows, in]: the weight gradient summed over every leading dim.
  auto weight_grads = [g, x, want_w, want_b]() -> std::pair<at::Tensor, at::Tensor> {
    const at::Tensor g2 = g.reshape({-1, g.size(-1)});
    at::Tensor gw = want_w ? at::mm(g2.t(), x.reshape({-1, x.size(-1)})) : at::Tensor();
    at::Tensor gb = want_b ? g2.sum(0) : at::Tensor();
    return {gw, gb};
  };
  WeightGradSink sink = current_sink();
  if (!sink || !(want_w || want_b)) {
    auto [gw, gb] = weight_grads();
    if (has_bias) return {gx, gw, gb};
    return {gx, gw};
  }
  sink([weight_grads, weight, bias, want_w, want_b] {
    c10::NoGradGuard no_grad;
    auto [gw, gb] = weight_grads();
    if (want_w) accumulate(weight, gw);
    if (want_b) accumulate(bias, gb);
  });
  if (has_bias) return {gx, at::Tensor(), at::Tensor()};
  return {gx, at::Tensor()};
}

// The parameters themselves are kept (not saved copies): a task accumulates into their .grad.
// Two functions, with and without bias: an undefined input would trip autograd's device checks.
struct SplitLinear : torch::autograd::Function<SplitLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight) {
    ctx->saved_data["x"] = x;
    ctx->saved_data["weight"] = weight;
    return at::linear(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return split_backward(ctx, grads[0], false);
  }
};

struct SplitLinearBias : torch::autograd::Function<SplitLinearBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& bias) {
    ctx->saved_data["x"] = x;
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["bias"] = bias;
    return at::linear(x, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return split_backward(ctx, grads[0], true);
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!g_split.load(std::memory_order_relaxed) || !at::GradMode::is_enabled())
    return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
  return bias.defined() ? SplitLinearBias::apply(x, weight, bias) : SplitLinear::apply(x, weight);
}

void set_split_weight_grad(bool on) { g_split.store(on); }
bool split_weight_grad() { return g_split.load(); }

void set_weight_grad_sink(WeightGradSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  g_sink = std::move(sink);
}

}  // namespace vescale::kernels
