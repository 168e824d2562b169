// Main of the multi-rank tests: every rank joins the world, runs the same test cases, and all
// ranks agree on the outcome, so one failing rank fails them all. The world is cpu over Gloo;
// VESCALE_TEST_DEVICE=cuda puts the tests' tensors on the GPU (the backend: VESCALE_BACKEND,
// nccl by default; gloo lets several ranks share one GPU), and without a visible GPU such a run
// prints a SKIPPED line and passes (the ctest label cuda, docs/gpu.md).
#define CATCH_CONFIG_RUNNER
#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "vescale/common/logging.h"
#include "vescale/dist/cuda_device.h"
#include "vescale/dist/world.h"

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const char* env_device = std::getenv("VESCALE_TEST_DEVICE");
  const std::string device = env_device && *env_device ? env_device : "cpu";
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "error: VESCALE_TEST_DEVICE='%s' is unknown; use cpu or cuda\n",
                 device.c_str());
    return 1;
  }
  if (device == "cuda" && vescale::dist::cuda_device_count() == 0) {
    std::printf("SKIPPED: no CUDA device visible (cuda tests need a GPU)\n");
    return 0;
  }
  int rc = 1;
  try {
    vescale::dist::init({.device = device});
    vescale::log::init(vescale::dist::rank());
    rc = Catch::Session().run(argc, argv);
    at::Tensor worst = at::full({1}, static_cast<int64_t>(rc != 0), at::kLong)
                           .to(at::Device(vescale::dist::device_string()));
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
