// What the training software does that a layout does not say (docs/planner.md): how many
// elementwise passes its block makes, what its data-parallel traffic carries, and what it
// overlaps. The planner plans for vescale's own trainer; `megatron` describes Megatron-LM with
// Transformer Engine as its published runs were made, to check the cost model against them.
#pragma once
#include <string>
#include <vector>

namespace vescale::planner {

struct TrainingStack {
  std::string name;
  // Elementwise traffic of a block's forward, per token: passes over the residual width, and
  // over each GEMM's output width (backward moves twice as much).
  double passes_per_residual = 0, passes_per_width = 0;
  // A routed (MoE) layer's passes over the residual width per expert choice of a token: the
  // gather to the experts and the weighted combine back.
  double passes_per_assignment = 0;
  // fp32-sized passes over the weights per micro-batch: the GEMMs reading them, the weight
  // gradients written and accumulated.
  double weight_passes = 0;
  bool reduces_in_bf16 = false;      // gradients on the wire in bf16 whatever the layout says
  double gathered_weight_bytes = 4;  // per weight in ZeRO's all-gathers (fp32 masters: 4)
  bool overlaps_param_gather =
      false;                 // ZeRO-1/2's gather of updated weights behind the next forward
  bool overlaps_tp = false;  // TP collectives pipelined with their GEMMs, in tp chunks
  std::string source;        // where the figures come from
};

// "vescale" (the default) or "megatron"; throws naming both.
const TrainingStack& training_stack(const std::string& name = "vescale");
std::vector<std::string> training_stack_names();

}  // namespace vescale::planner
