// The planner's model of one training step (docs/planner.md has every equation): compute from
// FLOPs and bytes with the device's achieved-efficiency curve, each collective from its bytes
// and the link class its mesh dim falls on, the pipeline from the schedule simulator with
// per-stage costs, and memory per rank from the dry run's formulas. Plain C++ over the
// model's shapes (one meta build per model), no world, no tensors.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/plan/schedule_kind.h"
#include "vescale/models/registry.h"
#include "vescale/planner/device_profile.h"
#include "vescale/planner/training_stack.h"
#include "vescale/train/config.h"

namespace vescale::planner {

// A layout the planner weighs. The mesh is laid out pp, dp, ep, tp (outermost first, row-major
// like DeviceMesh): tp's ranks are nearest, so it stays within a node when it fits.
struct Layout {
  int64_t pp = 1, dp = 1, ep = 1, tp = 1;
  bool sequence_parallel = false;  // with tp > 1
  int64_t zero = 0;
  bool checkpointing = false;
  int64_t micro_batch = 1;  // sequences per micro-batch and data rank
  plan::ScheduleKind schedule = plan::ScheduleKind::OneFOneB;  // with pp > 1
  int64_t chunks = 1;       // interleaved_1f1b: stages per pipeline rank
  bool bf16_reduce = false; // parallel.reduce_dtype=bf16: gradients cross the wire in bf16
  int64_t ranks() const { return pp * dp * ep * tp; }
  int64_t data_ranks() const { return dp * ep; }
  std::string describe() const;  // "pp=2 dp=4 tp=8 sp zero1 ckpt mb1 1f1b"
};

// describe()'s words back into a layout ("pp=8 dp=48 tp=8 sp zero1 bf16grad mb1
// interleaved_1f1bx2");
// unnamed dims are 1. Throws naming the word it cannot read.
Layout parse_layout(const std::string& text);

// What one layer of the model chain costs (Model::layers: embedding, blocks, head).
struct LayerShape {
  std::string name;
  bool block = false;
  double params = 0;           // stored parameters
  double expert_params = 0;    // of which sharded over ep (stacked experts)
  double active_matmul = 0;    // multiply-adds per token (experts: only the top_k that run)
  double moe_top_k = 0;        // tokens' expert choices, 0 for a dense layer
  double expert_matmul = 0;    // of active_matmul, the experts' (sharded over ep)
};

struct ModelShape {
  std::string type;
  int64_t n_layers = 0, dim = 0, vocab = 0, seq_len = 0, n_heads = 0;
  double flops_per_token = 0;  // training (6 N + attention), as MFU counts it
  std::vector<LayerShape> layers;
  bool moe() const;
  int64_t n_experts = 0;  // of a MoE layer (0: dense)
  models::BlockActivations block;  // what a block keeps for backward, per token
};

// The model's shapes from a meta build (no memory). Throws for a family that lists no layers.
ModelShape model_shape(const train::Config& config);

// Time of a collective over `ranks` ranks of one group, `bytes` per rank (ring algorithms:
// all-reduce 2(n-1)/n B/bw + 2(n-1) latency; reduce-scatter, all-gather and all-to-all half of
// it; a point-to-point transfer B/bw + latency).
// Ring passes of a collective: 2 for an all-reduce (a reduce-scatter, then an all-gather), 1
// for the others. Shared by the times below and the calibration's fits.
double ring_passes(Collective c);
// passes x ((n-1)/n V/B + (n-1) a), with the link's figures for `c` (Link::of).
double collective_s(Collective c, double bytes, int64_t ranks, const Link& link);
double all_reduce_s(double bytes, int64_t ranks, const Link& link);
double reduce_scatter_s(double bytes, int64_t ranks, const Link& link);
double all_gather_s(double bytes, int64_t ranks, const Link& link);
double all_to_all_s(double bytes, int64_t ranks, const Link& link);
double p2p_s(double bytes, const Link& link);

// A layout's mesh dims, outermost first (Layout's order).
enum class MeshDim { PP, DP, EP, TP };

// The link class a mesh dim's groups use: within a node when the dim and the dims inside it
// span at most gpus_per_node ranks, else across nodes.
const Link& link_of(const Layout& l, MeshDim dim, const DeviceProfile& device,
                    int64_t gpus_per_node);

struct StepPrediction {
  double step_s = 0;
  double compute_s = 0;     // the busiest pipeline rank's compute, communication left out
  double bubble_s = 0;      // pipeline idle time on that rank (makespan - its busy time)
  // Exposed communication per mesh dim ("tp", "ep", "pp", "dp") and the optimizer step.
  std::map<std::string, double> exposed_s;
  double optimizer_s = 0;
  // Bytes held by tensors at the step's peak (what a counting or caching allocator's peak
  // counter reports; the search adds the allocator's slack when it checks the fit): the
  // largest pipeline rank's, and each pipeline rank's (its stages, first to last).
  double peak_memory_bytes = 0;
  std::vector<double> peak_memory_by_rank;
  int64_t microbatches = 0;      // per step and data rank
  double tokens_per_s_per_device = 0, mfu = 0;
};

// Pipeline simulations by their inputs (schedule and costs): layouts that differ only in what
// happens after the backward (ZeRO stage, reduction dtype) share one. Owned by a search.
struct SimulationCache {
  std::map<std::vector<double>, parallel::pipeline::Simulation> runs;
};

// Throws naming what does not divide (the global batch over micro batch x data ranks).
// `cache` may be null.
// The busiest of `ep` expert-parallel ranks' share of the routed tokens over the mean, each rank
// holding `experts_per_rank` experts whose loads vary with coefficient of variation
// kExpertLoadCv (docs/planner.md): 1 + cv / sqrt(experts_per_rank) x the expected largest of
// `ep` standard normals. 1 for ep = 1.
double expert_imbalance(int64_t ep, double experts_per_rank);

StepPrediction predict(const ModelShape& model, const train::Config& config, const Layout& l,
                       int64_t global_batch, const DeviceProfile& device, int64_t gpus_per_node,
                       SimulationCache* cache = nullptr,
                       const TrainingStack& stack = training_stack());

}  // namespace vescale::planner
