#include "vescale/dist/progress.h"

#include <string>

#include "dist/store.h"
#include "dist/world_state.h"
#include "vescale/dist/world.h"

namespace vescale::dist {

namespace {

// Under the round's prefix, where the agent reads it (dist/node_rendezvous.cpp).
void report(const char* what, int64_t value) {
  if (!is_initialized() || rank() != 0 || !world_state().env.agent_store) return;
  set_text(*world_state().store, progress_key(what), std::to_string(value));
}

}  // namespace

void report_step(int64_t step) { report("step", step); }
void report_checkpoint(int64_t step) { report("checkpoint", step); }

}  // namespace vescale::dist
