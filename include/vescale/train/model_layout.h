// The model as this rank trains it: built from the config and laid out on the mesh by the plan.
// Parallelized whole, or, under a pipeline plan, built without memory and cut to this rank's
// stages (the other stages' layers stay on the meta device: no storage). Then the Hugging Face
// weights of model.init_from. The trainer does not branch on the layout after this.
#pragma once
#include <memory>
#include <string>

#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/pipeline/pipeline_stages.h"
#include "vescale/plan/plan.h"
#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

struct LaidOutModel {
  Model model;
  // This rank's stages under a pipeline plan, for the forward-backward to run; else null.
  std::unique_ptr<parallel::pipeline::PipelineStages> stages;
  // The mesh a step's gradients and data are split over: the stages' mesh (the mesh without
  // the pipeline dim) under a pipeline, else the whole mesh; null for one process. It lives as
  // long as the stages (the forward-backward keeps them).
  const mesh::DeviceMesh* replica_mesh = nullptr;
};

// Collective over `mesh` (null: one process on `device`, no plan). Throws for ZeRO with weights
// tied across pipeline stages, which is not supported yet.
LaidOutModel lay_out_model(const Config& config, const plan::Plan* plan,
                           const mesh::DeviceMesh* mesh, const std::string& device);

}  // namespace vescale::train
