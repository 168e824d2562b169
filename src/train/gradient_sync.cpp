// The gradients' way across the mesh (gradient_sync.h).
#include "vescale/train/gradient_sync.h"

#include <torch/nn/module.h>

#include "vescale/parallel/grad_layout.h"
#include "vescale/parallel/grad_reduce.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/parallel/sharded_parameters.h"

namespace vescale::train {

GradientSync::GradientSync(const Config& config, const plan::Plan& plan,
                           const mesh::DeviceMesh& mesh, Model& model, int64_t zero)
    : model_(model) {
  if (config.parallel.grad_reduce == GradReduce::PerParam) return;
  // The gradient layout, before step 1 (docs/parallel.md): buckets, and ZeRO's slices.
  auto layout = parallel::GradLayoutOptions::from_plan(plan.grad_reduce());
  layout.zero = static_cast<int>(zero);
  if (zero >= 3) layout.unit_pattern = model.block_pattern;  // one gather per block
  layout_ = std::make_unique<parallel::GradLayout>(*model.module, mesh, plan, layout);
  reducer_ = std::make_unique<parallel::GradReducer>(
      *layout_, parallel::GradReducerOptions{
                    .overlap = config.parallel.grad_reduce == GradReduce::Overlap,
                    .reduce_bf16 = config.parallel.reduce_dtype == DType::Bf16});
  if (zero >= 3) sharded_ = std::make_unique<parallel::ShardedParameters>(*layout_);
}

GradientSync::~GradientSync() {
  sharded_.reset();
  reducer_.reset();
  layout_.reset();
}

void GradientSync::finish() {
  if (reducer_)
    reducer_->finish();
  else
    parallel::reduce_gradients(*model_.module);
}

}  // namespace vescale::train
