#include "vescale/planner/training_stack.h"

#include "vescale/common/check.h"

namespace vescale::planner {
namespace {

// Our eager LLaMA block, counted (docs/planner.md): per residual-width element the two RMSNorms
// (7 passes each) and residual adds (3 each); per GEMM output element RoPE, the GQA repeat, the
// head transposes and the SiLU gate, about 3; per expert choice of a token (models/shared/moe.cpp,
// kernels/expert_routing.cpp) the gather (read, write), the combine's zeros (write), row copy
// (read, write), gate multiply (read, write) and sum (read): 8. Per micro-batch 6 passes over the
// fp32 weights: the forward's and the input gradient's GEMMs each stream them, the weight
// gradient's GEMM writes a fresh gradient, which autograd adds into the accumulated one (read
// both, write the sum); a block on 16 to 128 tokens measured about 1 ns per parameter beyond its
// work here. Gradients reduced as the layout says; ZeRO gathers the fp32 masters after the
// optimizer, unoverlapped; TP collectives exposed.
const TrainingStack kVescale{
    .name = "vescale",
    .passes_per_residual = 20,
    .passes_per_width = 3,
    .passes_per_assignment = 8,
    .weight_passes = 6,
    .source = "vescale's trainer (src/train, src/parallel): eager libtorch ops, counted"};

// Megatron-LM with Transformer Engine, as in its README's GPT runs: LayerNorm fused into the
// following GEMM's input (read, write: 2 passes each), fused bias-dropout-add (read two, write
// one: 3 each), so 10 per residual element; bias and GELU fused on fc1's output (2 passes over 4h
// of the 9h of GEMM outputs) and flash attention reading q, k, v in place: about 1 per GEMM
// output element; for MoE layers its fused permute and unpermute (read, write each: 4 per
// expert choice; its GPT rows have none). Per micro-batch the GEMMs read the bf16 weights twice
// (one fp32-sized pass) and the weight gradient's GEMM accumulates straight into the fp32
// main_grad (gradient_accumulation_fusion: read and write, 2): 3 passes. Distributed optimizer
// with bf16 model weights: bf16
// gradient reduce-scatter (grad_reduce_in_fp32 off) and bf16 parameter all-gather;
// --overlap-grad-reduce,
// --overlap-param-gather and --tp-comm-overlap (userbuffers: each collective split in tp
// chunks pipelined with its GEMM).
const TrainingStack kMegatron{
    .name = "megatron",
    .passes_per_residual = 10,
    .passes_per_width = 1,
    .passes_per_assignment = 4,
    .weight_passes = 3,
    .reduces_in_bf16 = true,
    .gathered_weight_bytes = 2,
    .overlaps_param_gather = true,
    .overlaps_tp = true,
    .source =
        "Megatron-LM README (GPT weak scaling: --overlap-grad-reduce "
        "--overlap-param-gather --tp-comm-overlap), Transformer Engine's fused kernels"};

}  // namespace

const TrainingStack& training_stack(const std::string& name) {
  if (name == kVescale.name) return kVescale;
  if (name == kMegatron.name) return kMegatron;
  VESCALE_FAIL("training stack '", name,
               "' is unknown; use vescale (this trainer, the "
               "default) or megatron (Megatron-LM with Transformer Engine, for comparing with "
               "its published runs)");
}

std::vector<std::string> training_stack_names() { return {kVescale.name, kMegatron.name}; }

}  // namespace vescale::planner
