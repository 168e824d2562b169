// ZeRO's optimizer (docs/parallel.md): AdamW on this rank's slices of a GradLayout's buckets.
// A rank keeps the moments and an fp32 copy of the parameters of its slice of every bucket
// only, updates them from the GradReducer's reduced slices, and all-gathers the updated
// parameters (ZeRO 1/2). Under ZeRO-3 the fp32 slices of the units' buckets are
// ShardedParameters' own, stepped in place and gathered at their next use. Parameters in no
// bucket (their gradients need no reduction) take a plain optim::AdamW.
//
//   ZeRO 1: buckets are all-reduced, each rank keeps only its slice of the result;
//   ZeRO 2: buckets are reduce-scattered, full gradients are freed as soon as they are sent;
//   ZeRO 3: also the units' parameters live as slices between uses (sharded_parameters.h).
//
// Checkpoints take AdamW's names, each range once: ZeRO and AdamW checkpoints load into each
// other on any mesh.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vescale/optim/adamw.h"
#include "vescale/optim/optimizer.h"
#include "vescale/parallel/grad_layout.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/parallel/sharded_parameters.h"

namespace vescale::parallel {

class ShardedAdamW : public optim::Optimizer {
 public:
  // `reducer` reduces by a layout with zero >= 1; `sharded` is ZeRO-3's transform of the same
  // layout (null below stage 3). Both must outlive the optimizer. `groups` hold every
  // parameter, as for optim::AdamW. Reads the parameters' values into its slices: build it
  // after the parameters are initialized or loaded.
  ShardedAdamW(GradReducer& reducer, ShardedParameters* sharded,
               std::vector<optim::ParamGroup> groups, optim::AdamWOptions options);
  ~ShardedAdamW() override;
  ShardedAdamW(const ShardedAdamW&) = delete;
  ShardedAdamW& operator=(const ShardedAdamW&) = delete;

  void set_lr(double lr) override;
  // After reducer.finish(): the norm of the whole gradient, whatever its sharding (one small
  // all-reduce per kind of parameter sharding), clipping with max_norm > 0. Collective.
  at::Tensor clip_grad_norm_(double max_norm, const optim::SumAcross& across) override;
  // Updates this rank's slices, then all-gathers each bucket's parameters (ZeRO-3: the root
  // unit's; the units' are gathered at their next use). Collective.
  void step() override;
  void zero_grad() override;
  // Over this rank's fp32 slices and the parameters outside the buckets.
  at::Tensor param_sum_of_squares() const override;
  // The moments of the bucketed parameters as boxes of their global shapes (each range once),
  // their common step count per parameter, and the plain AdamW's state of the rest.
  optim::OptimizerState state_dict() override;
  // Also rereads this rank's fp32 slices from the parameters (whole again under ZeRO-3:
  // ShardedParameters::gather_all() before loading them).
  void load_state_dict(const std::map<std::string, std::vector<int64_t>>& saved,
                       const optim::ReadState& read) override;

  // Bytes of optimizer state on this rank: moments and fp32 parameter slices.
  int64_t state_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vescale::parallel
