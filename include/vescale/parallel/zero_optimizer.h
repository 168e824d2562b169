// ZeRO (docs/parallel.md, docs/parallel.md): AdamW with its state sharded over the ranks that
// reduce each gradient bucket. Every bucket of the GradReducer is cut into equal slices over its
// reduction group; a rank keeps the moments and an fp32 copy of the parameters of its slice only,
// steps that slice, and all-gathers the updated parameters.
//
//   stage 1: buckets are all-reduced, each rank keeps only its slice of the result;
//   stage 2: buckets are reduce-scattered, full gradients are freed as soon as they are sent;
//   stage 3: also the parameters of each unit (GradReducerOptions::unit_pattern, e.g. one
//            transformer block) live only as slices between uses: all-gathered before the
//            unit's forward and its backward (the next unit's gather prefetched), released
//            after each. The root unit (embeddings, final norm, head) stays whole. Its
//            buckets are laid out from the parameters' placements when the reducer is built,
//            and the blocks are released when this optimizer is built, before the first step.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "vescale/parallel/grad_reducer.h"
#include "vescale/optim/adamw.h"
#include "vescale/optim/optimizer.h"

namespace vescale::parallel {

class ZeroOptimizer : public optim::Optimizer {
 public:
  // `reducer` must have options.zero >= 1 and outlive this optimizer. `groups` hold every
  // parameter, as for optim::AdamW: the bucketed ones are stepped on this rank's slice, the
  // rest (whose gradients need no reduction, or are reduced one by one) by a plain AdamW.
  ZeroOptimizer(GradReducer& reducer, std::vector<optim::ParamGroup> groups,
                optim::AdamWOptions options);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // After reducer.finish(): the norm of the whole gradient, whatever its sharding (one small
  // all-reduce per kind of parameter sharding), and with max_norm > 0 the clipping. A 0-dim
  // fp32 tensor, equal on every rank; nothing is read back to the host.
  at::Tensor clip_grad_norm_(double max_norm) override;
  // Updates this rank's slices, then all-gathers each bucket's parameters.
  void step() override;
  void zero_grad() override;
  // Over this rank's fp32 slices and the parameters outside the buckets.
  at::Tensor param_sum_of_squares() const override;
  // Stage 3: makes every parameter whole again (to read or save them); the next forward of a
  // unit releases its parameters again. The destructor does this too.
  void gather_params() override;

  void set_lr(double lr) override;
  double lr() const;
  // Checkpoints (names as optim::AdamW::state_dict's). The layout exists from the first
  // GradReducer::finish() under ZeRO 1/2, from construction under ZeRO-3; prepare() builds it
  // then (and is otherwise called by clip_grad_norm_ and step).
  void prepare();
  bool prepared() const;
  // This rank's part of the moments of the bucketed parameters: flat ranges [begin, end) of a
  // parameter's local shard, `values` viewing this rank's slice (write into it to load).
  // `owner` is false where another rank holds the same range (a parameter replicated on a mesh
  // dim that its bucket is not sliced over), so one copy is saved.
  struct StateRange {
    std::string name;  // "<param>.exp_avg" or "<param>.exp_avg_sq"
    at::Tensor param;
    int64_t begin = 0, end = 0;
    at::Tensor values;
    bool owner = true;
  };
  std::vector<StateRange> state_ranges();
  std::vector<std::string> bucketed_names() const;
  // The steps taken (every bucketed parameter's AdamW step count).
  int64_t step_count() const;
  void set_step_count(int64_t steps);
  // The plain AdamW of the parameters outside the buckets.
  std::map<std::string, at::Tensor> rest_state_dict() const;
  void load_rest_state_dict(const std::map<std::string, at::Tensor>& state);
  // After the parameters were overwritten (a checkpoint load): rereads this rank's fp32 slices
  // of them. Under ZeRO-3 call gather_params() before overwriting.
  void reload_params();

  // Optimizer's checkpoint calls, in AdamW's names: the moments of the bucketed parameters as
  // boxes of their global shapes (each range once), their common step count per parameter, and
  // the plain AdamW's state of the rest; so ZeRO and AdamW checkpoints load into each other.
  optim::OptimizerState state_to_save() override;
  bool ready_to_load() const override { return prepared(); }
  optim::OptimizerState state_to_load(
      const std::map<std::string, std::vector<int64_t>>& saved) override;
  void loaded() override;
  void params_loaded() override { reload_params(); }

  // Bytes of optimizer state on this rank: moments and fp32 parameter slices.
  int64_t state_bytes() const;

  struct Impl;

 private:
  // state_ranges() as boxes of the parameters' global shapes; `all`: every range this rank
  // holds (to load into), not only those it saves.
  std::vector<dtensor::TensorBox> state_boxes(bool all);

  std::unique_ptr<Impl> impl_;
  std::map<std::string, at::Tensor> loading_rest_, loading_steps_;
};

}  // namespace vescale::parallel
