// parallel.plan = "auto": vescale-train asks the planner for the world it was launched into
// (docs/planner.md). Every rank measures or reads the device profile, rank 0 searches, and its
// choice reaches every rank, which writes the same plan (from the family's template) and runs
// the config made for it. The global batch stays the config's: the choice never changes the
// math, only the layout.
#pragma once
#include <cstdint>
#include <string>

#include "vescale/planner/cost_model.h"
#include "vescale/train/config.h"

namespace vescale::planner {

struct AutoPlan {
  train::Config config;  // the run's config: the chosen mesh, plan file, ZeRO, checkpointing
  Layout layout;
  StepPrediction prediction;  // rank 0's (the ranks' calibrations differ a little)
};

// Collective over the world (dist::init first). `gpus_per_node`: this launch's ranks per node.
// Throws when no layout fits, naming the figures.
AutoPlan auto_plan(const train::Config& config, int64_t gpus_per_node);

// The line vescale-train logs after a few steps: "plan check: predicted 412 ms/step, measured
// 430 ms/step (+4.4%), peak memory predicted 61.2 GiB, measured 60.4 GiB".
std::string plan_check_line(const StepPrediction& p, double measured_step_s,
                            double measured_peak_bytes);

}  // namespace vescale::planner
