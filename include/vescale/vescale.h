// The vescale public API in one include.
#pragma once
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/launch_env.h"
#include "vescale/dist/launcher.h"
#include "vescale/dist/process_group.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"

namespace vescale {
using mesh::DeviceMesh;
}  // namespace vescale
