// Internal: the process-wide state behind dist::init.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <vector>

#include "vescale/dist/world.h"

namespace vescale::dist {

struct WorldState {
  LaunchEnv env;
  c10::intrusive_ptr<c10d::Store> store;
  ProcessGroup world;
  std::vector<ProcessGroup> groups;  // made by new_group, shut down with the world
  std::string device_type = "cpu";
  int cuda_device = 0;  // this rank's GPU when device_type is cuda
  Backend kind = Backend::Gloo;
  std::string gloo_host;
  std::chrono::milliseconds timeout{0};
};

// Throws if dist::init has not run.
WorldState& world_state();

}  // namespace vescale::dist
