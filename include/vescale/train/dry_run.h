// --dry-run: parameter count and per-rank memory under a config's plan and mesh, from a meta
// build of the model (nothing is allocated).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vescale/mesh/device_mesh.h"
#include "vescale/models/registry.h"
#include "vescale/train/config.h"

namespace vescale::train {

// Bytes each rank holds for the largest shard any rank gets (torch.chunk: the first ranks get
// ceil(n / k)), fp32 params and grads, AdamW's two fp32 moments; ZeRO stage z divides, over
// the dp dim, the optimizer state (z >= 1), grads (z >= 2) and params (z >= 3) of the
// parameters that are replicated on dp. Under a pipeline plan each pipeline rank holds only its
// stages' parameters, and the figures are those of the rank with the largest total.
//
// Activations kept for backward, per rank: micro-batches in flight (1 without a pipeline; the
// schedule's simulated peak with one) x the rank's transformer blocks x one block's per
// micro-batch. A block keeps about 34 s b h bytes at 16 bits (Korthikanti et al. 2022, with a
// fused attention that stores no s x s scores; s = train.seq_len, b = train.batch_size, h =
// model dim), split over tp as (10 + 24 / tp) without sequence parallelism and 34 / tp with
// it; fp32 doubles it. With activation checkpointing a block keeps only its input (2 s b h,
// split over tp with sequence parallelism) and one block at a time is recomputed. The head's
// fp32 logits and their gradient (8 s b vocab, / tp when the plan shards the head) on the last
// stage. An estimate: allocator slack and communication buffers are not counted.
struct StageMemory {
  int pp_rank = 0;
  std::string layers;  // "tok_embeddings .. layers.9"
  int64_t blocks = 0, in_flight = 1;
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  double activation_bytes = 0, activation_bytes_checkpointed = 0;
  // Of the three above: the experts' weights, gradients and optimizer state (MoE models).
  double expert_bytes = 0;
  double total(bool checkpointing) const {
    return param_bytes + grad_bytes + optimizer_bytes +
           (checkpointing ? activation_bytes_checkpointed : activation_bytes);
  }
};
struct MemoryEstimate {
  int64_t parameters = 0;  // total count, unsharded
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  double activation_bytes = 0;  // as configured (train.activation_checkpointing)
  int64_t zero = 0;             // the ZeRO stage they assume (the config's, else the plan's)
  bool sequence_parallel = false;
  bool experts = false;  // a mixture-of-experts model: the stages' expert_bytes are filled
  std::vector<StageMemory> stages;  // one per pipeline rank; one entry without a pipeline
  double total() const { return param_bytes + grad_bytes + optimizer_bytes + activation_bytes; }
};
MemoryEstimate memory_per_rank(const Config& config, const mesh::MeshShape& mesh);

// One block's activations for one micro-batch: what the family's block keeps for backward per
// token (models::BlockActivations: the residual-width tensors split by tp only with sequence
// parallelism, the GEMMs' gathered inputs never, the tensor-parallel ones by tp, and with
// `keeps_probabilities` each head's
// probabilities over the sequence), times s x b, at the training dtype's width. Under
// activation checkpointing its input alone, s b h (/ tp with sequence parallelism). Bytes. The
// planner's cost model uses the same.
double block_activation_bytes(const models::BlockActivations& block, int64_t seq_len,
                              int64_t micro_batch, int64_t tp, bool sequence_parallel, bool fp32,
                              bool keeps_probabilities);
double block_input_bytes(int64_t seq_len, int64_t micro_batch, int64_t dim, int64_t tp,
                         bool sequence_parallel, bool fp32);
// What one block's backward holds beside its saved tensors at its start, for one micro-batch
// (models::BlockActivations::backward_*, split as above). Bytes.
double block_backward_bytes(const models::BlockActivations& block, int64_t seq_len,
                            int64_t micro_batch, int64_t tp, bool sequence_parallel, bool fp32);
// AdamW's bytes per parameter element a rank holds the state of under ZeRO stage `zero`: the two
// fp32 moments, and under ZeRO-1/2 an fp32 copy of the parameter slice (ZeRO-3's slice is the
// parameter itself). The planner's cost model uses the same.
double optimizer_bytes_per_element(int64_t zero);
// The family's count for this model (models::ModelSpec::block_activations); throws naming the
// family when it has none.
models::BlockActivations block_activations(const ModelConfig& config);

// Under context parallelism, "context cp=4 (ring, zigzag): 8192 of 32768 tokens per rank";
// otherwise "".
std::string context_summary(const Config& config, const mesh::MeshShape& mesh);

// What --dry-run prints: parameter count, per-rank parameter, gradient, optimizer and
// activation memory under the config's plan and mesh (a row per pipeline rank, with and
// without activation checkpointing), and the peak against an 80 GB device (nothing is
// allocated).
// With gpus_per_node > 0 the mesh line says which dims fall within a node (row-major: the last
// dims are the nearest ranks). The batch line gives the step's sequences (run_plan.h).
std::string dry_run_report(const Config& config, const mesh::MeshShape& mesh,
                           int64_t gpus_per_node = 0);

// A ZeRO stage on a mesh without data parallelism shards nothing and keeps its buffers: the
// warning (with the memory it costs), or nothing.
std::optional<std::string> zero_without_data_ranks(const Config& config,
                                                   const mesh::MeshShape& mesh);

// Before the model is built: the estimate's peak per rank (memory_per_rank) against
// `available_bytes`, what this rank may use (`where` says what that is: "its GPU (80.0 GiB)",
// "its share of the host's available memory"). Throws with the dry-run figures and what would
// make the model fit, unless train.allow_oversubscribe. available_bytes <= 0: unknown, no check.
void check_fits(const Config& config, const mesh::MeshShape& mesh, double available_bytes,
                const std::string& where);

// What a rank may use: its GPU's memory on "cuda*", else the host's available memory (and the
// cgroup's limit, if lower) shared by `local_ranks`; `where` gets the words for it. 0: unknown.
double rank_memory_bytes(const std::string& device, int local_ranks, std::string& where);

// What --print-schedule prints: the pipeline schedule of the config's plan on its mesh, one line
// per pipeline rank (schedule.h's render_timeline), simulated with a forward, an input-gradient
// and a weight-gradient step of one unit each per layer (a stage's actions scale with its layers).
// Throws when the plan has no "pipeline" section or the mesh gives its dim no size.
std::string schedule_report(const Config& config);

}  // namespace vescale::train
