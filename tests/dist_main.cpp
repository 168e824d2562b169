// Main of the multi-rank tests: every rank joins the world over Gloo, runs the same test
// cases, and all ranks agree on the outcome, so one failing rank fails them all.
#define CATCH_CONFIG_RUNNER
#include <ATen/Parallel.h>
#include <ATen/ops/full.h>
#include <catch2/catch.hpp>

#include <cstdio>

#include "vescale/common/logging.h"
#include "vescale/dist/world.h"

int main(int argc, char** argv) {
  at::set_num_threads(1);
  int rc = 1;
  try {
    vescale::dist::init({.device = "cpu"});
    vescale::log::init(vescale::dist::rank());
    rc = Catch::Session().run(argc, argv);
    at::Tensor worst = at::full({1}, static_cast<int64_t>(rc != 0), at::kLong);
    vescale::dist::world().all_reduce(worst, vescale::dist::ReduceOp::Max).wait();
    if (worst.item<int64_t>() != 0 && rc == 0) {
      std::fprintf(stderr, "another rank failed its tests\n");
      rc = 1;
    }
    vescale::dist::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return rc;
}
