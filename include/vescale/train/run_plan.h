// The plan a run uses and how its step's batch lies on the mesh, derived once from the config
// and the mesh shape. Not collective, no world needed: vescale-train's checks before the
// rendezvous, the dry run and the trainer read the same.
//
// The plan is parallel.plan's file (none: every parameter replicated) with the config's
// parallel.pipeline.* fields replacing its pipeline section's. The batch: train.batch_size
// sequences per micro-batch on each data rank, the data ranks (the product of the data dims:
// dp, and ep), and the micro-batches per step. With train.global_batch_size the micro-batches
// are derived, global / (micro batch x data ranks), so the step trains on the same sequences
// whatever the layout (the loader hands data rank r of D its part of each micro-batch's
// consecutive samples), and a pipeline's micro-batches are set to them. Without it, they are
// train.grad_accum, or the plan's pipeline micro-batches.
#pragma once
#include <cstdint>
#include <optional>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"
#include "vescale/train/config.h"

namespace vescale::train {

struct BatchLayout {
  int64_t micro_batch = 1;   // sequences per micro-batch and data rank (train.batch_size)
  int64_t data_ranks = 1;    // ranks that see other sequences
  int64_t microbatches = 1;  // per optimizer step (and data rank)
  int64_t global() const { return micro_batch * data_ranks * microbatches; }  // per step
};

struct RunPlan {
  std::optional<plan::Plan> plan;  // none: every parameter replicated
  BatchLayout batch;
};

// Throws naming the field and the fix: a global batch that the micro batch times the data ranks
// does not divide (all four numbers), parallel.pipeline.* without a pipeline plan.
RunPlan run_plan(const Config& config, const mesh::MeshShape& mesh);

}  // namespace vescale::train
