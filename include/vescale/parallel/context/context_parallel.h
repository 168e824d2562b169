// Context parallelism's boundary on a model (docs/context_parallel.md): the model's attention
// cores (Model::attention_cores) attend over the whole sequence, split over the ranks of a cp
// group, while everything else runs on each rank's tokens as on one device.
#pragma once
#include <string>
#include <vector>

#include "vescale/dist/process_group.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/parallel/context/ring_attention.h"
#include "vescale/plan/context_spec.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel::context {

using ContextAttention = plan::ContextAttention;

// Puts a link in the Context slot of each submodule of `model` matching `pattern` (a block
// pattern, '*' one name component) that runs its forward(q, k, v) as ring or all-gather
// attention over `group` with `split` (causal). Plain q, k, v are this rank's tokens; DTensors
// (the model laid out on a mesh with the cp dim joined to dp: docs/context_parallel.md) run
// the same on their local shards, which keep their placements (batch and head shards only).
// Process-wide (the hook table); not collective.
// The group must outlive the links. Throws naming the pattern when nothing matches.
[[nodiscard]] std::vector<nn::HookHandle> attend_over_split_sequence(torch::nn::Module& model,
                                                                     const std::string& pattern,
                                                                     const SequenceSplit& split,
                                                                     dist::ProcessGroup& group,
                                                                     ContextAttention kind);

}  // namespace vescale::parallel::context
