// What a rank tells the agent that restarts it (vescale-run --max-restarts, --nnodes MIN:MAX):
// the last step it finished and the checkpoint it stands on, for the agent's restart line
// ("restart 1/2 after rank 1 ... failed with signal Killed at step 7; resuming from step 6").
// Process-wide; only rank 0's reports are kept; a no-op unless an agent serves the store (one
// small store write). Not collective.
#pragma once
#include <cstdint>

namespace vescale::dist {

// `step` steps are done.
void report_step(int64_t step);
// The run stands on the checkpoint after `step` steps: committed, or resumed from.
void report_checkpoint(int64_t step);

}  // namespace vescale::dist
