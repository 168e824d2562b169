// Everything that can be checked of a run before any process group exists: the mesh against
// the world size, the plan against the mesh and the model (every pattern, every dim), the
// pipeline's cuts against the model's layers and the schedule, ZeRO against the reduction, what
// a pipeline cannot do. vescale-train calls it before dist::init and the Trainer again at
// construction, so a config or plan error reads the same at 1 rank or N, before any rendezvous.
#pragma once
#include <cstdint>

#include "vescale/train/config.h"

namespace vescale::train {

// Throws vescale::Error naming the field (or the plan's key) and the fix. Not collective: every
// rank can call it alone. Builds the model on the meta device (no memory).
void validate(const Config& config, int64_t world_size);

}  // namespace vescale::train
