// One step's micro-batches through the model as the layout runs them: forward (under bf16
// autocast when train.dtype says so), the fp32 next-token loss (and a model's aux loss),
// backward when training, and the mean loss, the same on every rank. The trainer's step reads
// the same whatever the layout: the whole model on one micro-batch after another
// (local_forward_backward.cpp), or this rank's stages by the pipeline schedule
// (pipeline_forward_backward.cpp).
#pragma once
#include <functional>
#include <memory>

#include "vescale/mesh/device_mesh.h"
#include "vescale/optim/optimizer.h"
#include "vescale/plan/plan.h"
#include "vescale/parallel/pipeline/pipeline_stages.h"
#include "vescale/parallel/pipeline/runner.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/token_data.h"

namespace vescale::parallel {
class GradReducer;
}

namespace vescale::train {

class ForwardBackward {
 public:
  using NextBatch = std::function<DataLoader::Batch()>;
  // Told the phase each part of the work starts ("reading the batch", "forward", "backward",
  // "running the pipeline schedule"), for the trainer's error messages.
  using PhaseSink = std::function<void(const char*)>;

  virtual ~ForwardBackward() = default;
  // Micro-batches per optimizer step.
  virtual int64_t microbatches() const = 0;
  // Training: microbatches() batches from `next`, gradients accumulated (the reducer syncs on the
  // last); the mean loss. Collective.
  virtual double train(const NextBatch& next) = 0;
  // Evaluation (the caller sets eval mode and no grad): `n` batches, forward only; the mean loss.
  virtual double evaluate(const NextBatch& next, int64_t n) = 0;
  // After the gradient reduction: the sums that cross the layout (weights tied across stages).
  virtual void after_reduction() {}
  // `t` summed over the ranks that hold other layers (pipeline ranks), in place; else nothing.
  virtual void sum_over_layers(at::Tensor& t) { (void)t; }
  // For the optimizer's gradient norm: a sum of squares over every stage (empty: local).
  virtual optim::SumAcross norm_across() { return {}; }
  // The pipeline's schedule and its last step's counters; null for a local run.
  virtual const parallel::pipeline::Schedule* schedule() const { return nullptr; }
  virtual const parallel::pipeline::RunnerStats* stats() const { return nullptr; }
};

struct ForwardBackwardOptions {
  const mesh::DeviceMesh* mesh = nullptr;  // the model's mesh (null: one process)
  std::string device = "cpu";
  bool bf16 = false;
  int64_t grad_accum = 1;
  parallel::GradReducer* reducer = nullptr;  // set_sync per micro-batch; may be null
  // Context parallelism: the global positions of this rank's tokens of each sequence, by which
  // the batch's tokens and targets are cut and the model runs (Model::forward_at); undefined:
  // whole sequences.
  at::Tensor positions;
  ForwardBackward::PhaseSink phase;
};

// The step's forward-backward for the layout: with `stages` (a pipeline plan,
// model_layout.h), this rank's stages run by the schedule, the loss on the last stage sent to
// every rank, the tied weights' gradients and the gradient norm summed across the stages;
// without, the whole model, grad_accum micro-batches one after another (each loss scaled by
// 1/accum).
std::unique_ptr<ForwardBackward> make_forward_backward(
    Model& model, std::unique_ptr<parallel::pipeline::PipelineStages> stages, int world_rank,
    ForwardBackwardOptions o);

}  // namespace vescale::train
