// vescale-plan's search: every layout of a config's model on a number of devices under its
// fixed global batch (meshes pp x dp x ep x tp, sequence parallelism, ZeRO 0-3, activation
// checkpointing, micro batch, pipeline schedule and chunks), each predicted by the cost model;
// what does not divide or fit is pruned and counted by reason; the fastest come first.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vescale/planner/cost_model.h"

namespace vescale::planner {

struct SearchOptions {
  int64_t gpus = 0;  // devices to plan for (required)
  int64_t gpus_per_node = 8;
  int64_t global_batch = 0;       // sequences per step (train.global_batch_size)
  double memory_fraction = 0.9;   // of the device's memory a layout may plan to use
  size_t top = 5;
  bool sequence_parallel = true;  // try SP (the family's plan template has rules for it)
  std::string stack = "vescale";  // the training stack predicted (training_stack.h)
};

struct Candidate {
  Layout layout;
  StepPrediction prediction;
};

struct SearchResult {
  std::vector<Candidate> best;  // the `top` fastest that fit, fastest first
  int64_t weighed = 0;          // layouts predicted
  std::map<std::string, int64_t> pruned;  // reason -> layouts left out
};

SearchResult search(const ModelShape& model, const train::Config& config,
                    const DeviceProfile& device, const SearchOptions& options);

}  // namespace vescale::planner
