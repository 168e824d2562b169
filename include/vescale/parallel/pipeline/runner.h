// Runs a pipeline schedule (schedule.h) on this rank, one optimizer step at a time
// (docs/pipeline.md). The stages are functions of their input, given by the caller (the
// trainer cuts the model's layers); the runner keeps each (stage, micro-batch)'s input and
// output between its forward and its backward, moves activations and gradients between the
// pipeline ranks over the pp dim's group (tensors as their local shards; a DTensor is rebuilt
// on the receiving stage's mesh from the spec its sender announced once), and leaves the
// weight gradients where autograd puts them: the caller reduces them over dp afterwards.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/pipeline/schedule.h"

namespace vescale::parallel::pipeline {

// A stage's forward: the tensors that cross the boundary into it (stage 0: its input alone) to
// the ones that cross out (at most 4: the activation, and e.g. a loss's running statistics that
// every stage adds to). Floating tensors carry gradients back.
struct StageForward {
  int stage;  // global stage index
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> forward;
};

struct RunnerOptions {
  // Called before each backward action: true when it is the last one of the step to add to
  // its stage's gradients (GradReducer::set_sync, so buckets launch as they complete).
  std::function<void(bool)> set_grad_sync;
};

struct RunnerStats {
  int64_t peak_live = 0;  // most (stage, micro-batch) activation sets held at once this step
  int64_t sends = 0, recvs = 0;
  // Most sent tensors held at once: each is freed once its send is finished (bounded by the
  // pipeline's depth, not by the micro-batches).
  int64_t peak_sends_held = 0;
  // Wall seconds: the whole step, and its compute actions by kind (F; B or I; W), whose sum
  // over the step is this rank's busy time: 1 - busy / step is its measured bubble (waits on
  // receives included).
  double step_s = 0, forward_s = 0, backward_s = 0, weight_s = 0;
  int64_t forwards = 0, backwards = 0, weights = 0;
  double busy_s() const { return forward_s + backward_s + weight_s; }
};

class PipelineRunner {
 public:
  using Input = std::function<at::Tensor(int microbatch)>;  // stage 0's input
  // The last stage's loss of one micro-batch (a scalar) from its outputs.
  using Loss = std::function<at::Tensor(const std::vector<at::Tensor>& outputs, int microbatch)>;

  // Collective over the world (every rank constructs its runner at the same time): checks that
  // every pipeline peer runs the same schedule (each rank's list against what this rank
  // generated for it), validates it, and opens the point-to-point links between neighbouring
  // pipeline ranks with one exchange (no lazily created communicators later).
  // `stage_mesh`: where the stages' DTensors live (null: plain tensors).
  PipelineRunner(Schedule schedule, const mesh::DeviceMesh& mesh, const std::string& pp_dim,
                 std::vector<StageForward> stages, const mesh::DeviceMesh* stage_mesh,
                 RunnerOptions options = {});
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  // One step: every action of this rank's list. Backward uses loss / microbatches, so the
  // gradients are those of the mean loss. Returns the sum of the micro-batch losses (detached)
  // on the rank that runs the last stage; undefined on the others.
  at::Tensor train_step(const Input& input, const Loss& loss);
  // Forward only, without grad (evaluation), over `microbatches` micro-batches (any count),
  // one after the other. Same return.
  at::Tensor eval_step(const Input& input, const Loss& loss, int microbatches);

  const Schedule& schedule() const;
  bool runs_last_stage() const;
  int pp_rank() const;
  const RunnerStats& last_step() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vescale::parallel::pipeline
