// One rank's part of a model cut into pipeline stages (docs/pipeline.md): the schedule, the
// layers of this rank's stages kept (the other stages' parameters left on the meta device),
// parallelized on the stage's mesh (the mesh without the pipeline dim), the weights that
// stages on several pipeline ranks share (tied embeddings) with a group over each set, and the
// cross-stage sums a step needs: the tied weights' gradients, the gradient norm, the loss.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vescale/dist/process_group.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/plan/plan.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel::pipeline {

// A layer of the model in pipeline order: its name and the modules it runs.
struct LayerModules {
  std::string name;                  // "tok_embeddings", "layers.3", "output"
  std::vector<std::string> modules;  // FQNs: "layers.3"; "norm", "output"
};

class PipelineStages {
 public:
  // Collective over `mesh`. `model` was built on the meta device (kept alive here: its layers'
  // forwards belong to it); its `layers` in order; `init` reruns its initialisation (through
  // vescale::random, so every fill takes the offset it has on one device). This rank's
  // parameters and every buffer get storage on `device`. Throws naming the plan field for a
  // pipeline dim the mesh lacks or stage cuts that do not fit the layers.
  PipelineStages(std::shared_ptr<torch::nn::Module> model, const std::vector<LayerModules>& layers,
                 const plan::Plan& plan, const mesh::DeviceMesh& mesh, const std::string& device,
                 const std::function<void()>& init);
  ~PipelineStages();
  PipelineStages(const PipelineStages&) = delete;
  PipelineStages& operator=(const PipelineStages&) = delete;

  // This rank's stages' modules under their global names (their named_parameters() are what
  // this rank trains and saves).
  const std::shared_ptr<torch::nn::Module>& root() const { return root_; }
  const mesh::DeviceMesh& stage_mesh() const { return stage_mesh_; }
  const Schedule& schedule() const { return schedule_; }
  const std::string& dim() const { return dim_; }
  int pipeline_rank() const { return me_; }
  // Stage s runs layers [first_layer(s), end_layer(s)).
  int64_t first_layer(int stage) const { return starts_.at(stage); }
  int64_t end_layer(int stage) const { return starts_.at(stage + 1); }
  bool has_shared_weights() const { return !shared_.empty(); }
  // One line for the log: the schedule and this rank's stages with their layers.
  std::string describe(const std::vector<LayerModules>& layers) const;

  // Sums `t` (contiguous, this rank's part) over the pipeline ranks in place. Collective.
  void sum_over_pipeline(at::Tensor& t);
  // Collective over each set of pipeline ranks sharing weights: sums their gradients.
  void reduce_shared_grads();
  // A sum of squares of this rank's gradients -> the whole model's (over the pipeline ranks,
  // each shared weight counted once). Collective over the pipeline dim.
  at::Tensor sum_across_stages(const at::Tensor& sum_of_squares);
  // The last stage's `sum` (this rank's when it runs it) on every rank, divided by `count`.
  // Collective over the pipeline dim; a timeout names the last stage's rank.
  double last_stage_mean(const at::Tensor& sum, bool runs_last_stage, int64_t count,
                         int world_rank);

 private:
  struct SharedWeights {
    dist::ProcessGroup group;
    std::vector<at::Tensor> params;
    bool first = false;  // this rank is the lowest of the set: its copy counts in the norm
  };
  Schedule schedule_;
  std::vector<int64_t> starts_;  // first layer of each stage, then the layer count
  mesh::DeviceMesh stage_mesh_;
  std::shared_ptr<torch::nn::Module> model_;  // the whole model, other stages on meta
  std::shared_ptr<torch::nn::Module> root_;
  std::vector<SharedWeights> shared_;
  dist::ProcessGroup pp_group_;
  std::string dim_;
  std::string device_;
  int me_ = 0;
};

}  // namespace vescale::parallel::pipeline
