// The launcher's flags, shared by vescale-run and vescale-train.
#pragma once
#include <CLI/CLI.hpp>

#include "vescale/dist/launcher.h"

namespace vescale::apps {

// Adds --nproc-per-node, --nnodes (N or MIN:MAX), --node-rank, --master-addr, --master-port,
// --grace-seconds, --max-restarts, --rdzv-last-call, --rdzv-timeout.
void add_launch_flags(CLI::App& app, dist::LauncherOptions& options);

}  // namespace vescale::apps
