// The trainer's mixture-of-experts bookkeeping (docs/moe.md): each step's expert loads made
// global, and the aux-loss-free expert bias update, once per optimizer step.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "vescale/train/forward_backward.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/train/trainer.h"

namespace vescale::train {

void Trainer::balance_experts(StepMetrics& m) {
  if (!model_.moe.take_loads) return;
  c10::AutoGradMode no_grad(false);
  auto loads = model_.moe.take_loads();  // this step's, then reset
  const auto L = static_cast<int64_t>(loads.size());
  const int64_t E = model_.moe.n_experts;
  // [L, E]: a layer's loads are Partial over the ranks that saw other tokens (a collective on
  // the mesh); a pipeline stage fills its own layers, the pp group sums the table.
  auto table = at::zeros({L, E}, at::TensorOptions().dtype(at::kFloat).device(at::Device(place_.device)));
  std::vector<at::Tensor> global(loads.size());
  for (int64_t i = 0; i < L; ++i) {
    const auto& l = loads[i];
    if (!l.defined()) continue;
    global[i] = dtensor::is_dtensor(l) ? dtensor::full_tensor(l) : l;
    table[i].copy_(global[i]);
  }
  forward_backward_->sum_over_layers(table);  // pipeline ranks hold other layers' experts
  if (model_.moe.update_bias) model_.moe.update_bias(global);
  table = table.to(at::kCPU, at::kDouble).contiguous();
  const double* t = table.data_ptr<double>();
  m.expert_loads.assign(L, {});
  for (int64_t i = 0; i < L; ++i) m.expert_loads[i].assign(t + i * E, t + (i + 1) * E);
}

}  // namespace vescale::train
