// Cutting a model's layers into pipeline stages (docs/pipeline.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vescale/plan/plan.h"

namespace vescale::parallel::pipeline {

// The index of each stage's first layer in `layers` (the model's layer names in pipeline
// order), for `stages` stages. With spec.stages, each entry names a stage's first layer and the
// layers before the first entry join stage 0; otherwise "even" gives each stage
// floor-balanced runs of layers (the embedding and the head count as one layer each). Throws
// naming the plan field: an unknown or out-of-order name (with a "did you mean"), a count
// other than `stages`, more stages than layers.
std::vector<int64_t> stage_starts(const std::vector<std::string>& layers,
                                  const plan::PipelineSpec& spec, int64_t stages,
                                  const std::string& source = "<plan>");

}  // namespace vescale::parallel::pipeline
