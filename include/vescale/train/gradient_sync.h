// The gradients' way across a mesh of several ranks, as the config chooses it: the layout
// (buckets and ZeRO's slices, built before step 1), the reducer that runs it, ZeRO-3's sharded
// parameters; or parallel.grad_reduce=per_param's one collective per parameter.
#pragma once
#include <cstdint>
#include <memory>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"
#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::parallel {
class GradLayout;
class GradReducer;
class ShardedParameters;
}  // namespace vescale::parallel

namespace vescale::train {

class GradientSync {
 public:
  // On `mesh` (the model's, or a pipeline stage's) of more than one rank, for the ZeRO stage
  // `zero`. ZeRO-3 turns the blocks' parameters into slices here, before their first use.
  GradientSync(const Config& config, const plan::Plan& plan, const mesh::DeviceMesh& mesh,
               Model& model, int64_t zero);
  ~GradientSync();  // ZeRO-3's parameters whole again, then the reducer, then the layout
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // After the last backward of a step: every gradient reduced as its parameter is placed (the
  // buckets finish what backward launched). Collective.
  void finish();

  // The bucketed reducer; null with parallel.grad_reduce=per_param.
  parallel::GradReducer* reducer() const { return reducer_.get(); }
  // ZeRO-3's parameters; null below ZeRO-3.
  parallel::ShardedParameters* sharded() const { return sharded_.get(); }

 private:
  Model& model_;
  std::unique_ptr<parallel::GradLayout> layout_;
  std::unique_ptr<parallel::GradReducer> reducer_;
  std::unique_ptr<parallel::ShardedParameters> sharded_;
};

}  // namespace vescale::train
