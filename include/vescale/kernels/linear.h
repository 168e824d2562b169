// y = x W^T + b, as aten::linear, with a backward whose weight gradient can wait (zero-bubble
// pipeline schedules: docs/pipeline.md). Models call it for their linear layers; it knows
// nothing about pipelines.
//
// While split_weight_grad is on (process-wide, read at forward time) linear() records its own
// autograd function: its backward computes the input gradient, and hands the weight and bias
// gradients to the weight-gradient sink when one is installed (the pipeline runner installs
// one around a backward-input action and runs the tasks at the schedule's W), or computes them
// at once when none is. The weight and bias are not inputs of that function (autograd would
// run their AccumulateGrad, hook included, even for a gradient that waits); their gradients are
// added by the function itself. A task adds its gradient to the parameter's .grad (accumulating,
// as autograd does) and then runs the parameter's post-accumulate-grad hook (gradient buckets),
// so checkpointed blocks, accumulation and shared weights behave as with autograd's own
// backward. Off (the default) it is aten::linear itself.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>

namespace vescale::kernels {

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

void set_split_weight_grad(bool on);
bool split_weight_grad();

using WeightGradTask = std::function<void()>;
using WeightGradSink = std::function<void(WeightGradTask)>;
// Installs `sink` (empty: none) process-wide; backward may run on autograd's device threads.
void set_weight_grad_sink(WeightGradSink sink);

}  // namespace vescale::kernels
