// Internal: the trainer's pipeline state (trainer_pipeline.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vescale/parallel/pipeline/pipeline_stages.h"
#include "vescale/parallel/pipeline/runner.h"

namespace torch::nn {
class Module;
}

namespace vescale::train {

// Whether some submodule of `root` matches the block pattern as activation checkpointing
// matches it (component_match: '*' is one name component).
bool has_block(torch::nn::Module& root, const std::string& pattern);

// This rank's pipeline stages (parallel/pipeline/pipeline_stages.h), the full model they were
// cut from (its other stages' parameters on the meta device), and the runner of the schedule.
struct PipelineTraining {
  std::vector<parallel::pipeline::LayerModules> layers;
  std::unique_ptr<parallel::pipeline::PipelineStages> stages;
  std::shared_ptr<torch::nn::Module> full_model;
  std::unique_ptr<parallel::pipeline::PipelineRunner> runner;
};

}  // namespace vescale::train
