// ZeRO-3's model transform (docs/parallel.md), applied after parallelize: the parameters of
// each unit of a GradLayout (layout.options().unit_pattern, e.g. one transformer block) live
// only as this rank's fp32 slices of their buckets between uses. A link in each unit module's
// hook chain (nn::HookSlot::ZeroGather) all-gathers the unit's parameters before its forward
// (prefetching the next unit's) and releases them after; a hook on the gradient of its output
// gathers them again before its backward (prefetching the previous unit's), and one on the
// gradient of its input releases them once its backward is done. The root unit (embeddings,
// final norm, head) stays whole. A released parameter keeps its TensorImpl (autograd's saved
// references and the module's members stay valid); only its storage goes (FSDP's trick).
//
// ShardedAdamW steps the slices in place (they are its fp32 master values) and then calls
// values_changed(). Every call here is collective over the units' shard groups, in the same
// order on every rank (the model's forward and backward order).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "vescale/parallel/grad_layout.h"

namespace vescale::parallel {

class ShardedParameters {
 public:
  // Reads this rank's slices of every non-root unit's parameters, releases them and installs
  // the links. `layout` (zero == 3, with units) must outlive this. Not collective.
  explicit ShardedParameters(const GradLayout& layout);
  // Gathers every parameter back (collective) and removes the links.
  ~ShardedParameters();
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  // Whether bucket k belongs to a released unit (its values live in slice(k)).
  bool holds(size_t k) const;
  // This rank's fp32 slice of bucket k's parameters (holds(k) only); write into it to change
  // them, then call values_changed().
  at::Tensor slice(size_t k) const;
  // After the slices changed: every gathered unit (and a prefetch in flight) holds stale
  // values; they are dropped and regathered at the next use.
  void values_changed();
  // Makes every parameter whole (to read or overwrite them: checkpoints, sampling); each unit
  // is released again at its next forward. Collective.
  // After overwriting them, write the new values into the slices (ShardedAdamW's
  // load_state_dict does).
  void gather_all();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vescale::parallel
