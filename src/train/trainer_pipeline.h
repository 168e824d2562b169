// Internal: the trainer's pipeline state (trainer_pipeline.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vescale/dist/process_group.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/pipeline/runner.h"
#include "vescale/parallel/pipeline/schedule.h"

namespace torch::nn {
class Module;
}

namespace vescale::train {

// Whether some submodule of `root` matches the block pattern as activation checkpointing
// matches it (component_match: '*' is one name component).
bool has_block(torch::nn::Module& root, const std::string& pattern);

// Weights that stages on several pipeline ranks use (tied embeddings), and the group over them.
struct SharedWeights {
  dist::ProcessGroup group;
  std::vector<at::Tensor> params;
  bool first = false;  // this rank is the lowest of the group: its copy counts in the norm
};

struct PipelineTraining {
  parallel::pipeline::Schedule schedule;
  std::vector<int64_t> starts;  // first layer of each stage, then the layer count
  mesh::DeviceMesh stage_mesh;
  std::shared_ptr<torch::nn::Module> full_model;  // other stages' parameters on meta
  std::vector<SharedWeights> shared;
  dist::ProcessGroup pp_group;
  std::string dim;
  int me = 0;  // pipeline rank
  std::unique_ptr<parallel::pipeline::PipelineRunner> runner;
};

}  // namespace vescale::train
