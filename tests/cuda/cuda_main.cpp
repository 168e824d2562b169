// Main of the cuda tests (ctest label cuda, docs/gpu.md). Every case runs its CPU half, then
// returns early when no GPU is visible; such a run that passed prints the SKIPPED line that
// ctest's SKIP_REGULAR_EXPRESSION turns into "skipped". A failing CPU half still fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "vescale/dist/cuda_device.h"

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const auto& c = session.configData();
  const bool listing = c.listTests || c.listTestNamesOnly || c.listTags || c.listReporters;
  const int rc = session.run();
  if (!listing && rc == 0 && vescale::dist::cuda_device_count() == 0)
    std::printf("SKIPPED: no CUDA device visible (cuda tests need a GPU)\n");
  return rc;
}
