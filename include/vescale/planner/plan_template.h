// vescale-plan --write: a layout made into files vescale-train runs as they are. The sharding
// plan comes from the model family's plan template (configs/plans/templates/<model.type>.json:
// each weight's placement on the tp and ep dims, the module boundaries with tensor parallelism
// with and without sequence parallelism, the experts module), projected onto the layout's mesh:
// data dims replicate weights and split activations (Shard(0)), tp and ep take the template's.
#pragma once
#include <string>

#include "vescale/planner/cost_model.h"
#include "vescale/train/config.h"

namespace vescale::planner {

// The mesh dims of a layout with more than one rank, outermost first (pp, dp, ep, tp), as a
// config's parallel.mesh; {"dp": 1} for one device.
std::vector<std::pair<std::string, int64_t>> layout_mesh(const Layout& l);

// The family's template for model.type `type`; throws naming the file when there is none.
std::string plan_template_path(const std::string& type);
// Whether the template has sequence-parallel rules (the search tries SP only then).
bool template_has_sequence_parallel(const std::string& template_path);

// The plan for `l` as JSON text; `microbatches` goes into a pipeline section (the trainer
// derives it again from the global batch). Throws naming the template and what it lacks (SP
// rules, the experts module for an ep dim).
std::string plan_for_layout(const std::string& template_path, const Layout& l,
                            int64_t microbatches);

// The config for `l`: `config` with its mesh, plan (`plan_path`), ZeRO stage, reduction dtype,
// activation checkpointing, micro batch and global batch set; as JSON text.
std::string config_for_layout(const train::Config& config, const Layout& l, int64_t global_batch,
                              const std::string& plan_path);

}  // namespace vescale::planner
