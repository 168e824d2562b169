// --dry-run: parameter count and per-rank memory under a config's plan and mesh, from a meta
// build of the model (nothing is allocated).
#pragma once
#include <cstdint>
#include <string>

#include "vescale/mesh/device_mesh.h"
#include "vescale/train/config.h"

namespace vescale::train {

// Bytes each rank holds for the largest shard any rank gets (torch.chunk: the first ranks get
// ceil(n / k)), fp32 params and grads, AdamW's two fp32 moments; ZeRO stage z divides, over
// the dp dim, the optimizer state (z >= 1), grads (z >= 2) and params (z >= 3) of the
// parameters that are replicated on dp. Activations are not counted.
struct MemoryEstimate {
  int64_t parameters = 0;  // total count, unsharded
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  int64_t zero = 0;  // the ZeRO stage they assume (the config's, else the plan's)
};
MemoryEstimate memory_per_rank(const Config& config, const mesh::MeshShape& mesh);

// What --dry-run prints: parameter count, and per-rank parameter, gradient and optimizer
// memory under the config's plan and mesh (nothing is allocated).
std::string dry_run_report(const Config& config, const mesh::MeshShape& mesh);

// What --print-schedule prints: the pipeline schedule of the config's plan on its mesh, one line
// per pipeline rank (schedule.h's render_timeline), simulated with a forward, an input-gradient
// and a weight-gradient step of one unit each per layer (a stage's actions scale with its layers).
// Throws when the plan has no "pipeline" section or the mesh gives its dim no size.
std::string schedule_report(const Config& config);

}  // namespace vescale::train
