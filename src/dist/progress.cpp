#include "vescale/dist/progress.h"

#include <string>

#include "dist/world_state.h"
#include "vescale/dist/world.h"

namespace vescale::dist {

namespace {

// Under the round's prefix, where the agent reads it (dist/node_rendezvous.cpp).
void report(const char* what, int64_t value) {
  if (!is_initialized() || rank() != 0 || !world_state().env.agent_store) return;
  const std::string v = std::to_string(value);
  world_state().store->set(std::string("vescale/progress/") + what,
                           std::vector<uint8_t>(v.begin(), v.end()));
}

}  // namespace

void report_step(int64_t step) { report("step", step); }
void report_checkpoint(int64_t step) { report("checkpoint", step); }

}  // namespace vescale::dist
