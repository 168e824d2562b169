// llama_tiny (configs/llama_tiny.json) trained for 20 steps through the Trainer on one device
// mesh, its device from dist::init: on the GPU in fp32 the loss curve is the CPU's within 1e-4
// (relative) per step, and in bf16 (autocast, fp32 master weights) it stays within 2% of the
// fp32 curve and falls. The CPU reference run happens here on every machine; only the GPU runs
// need a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/train/trainer.h"

using namespace vescale;

namespace {

constexpr int64_t kSteps = 20;

// The 20-step loss curve of llama_tiny on `device` ("cpu" or "cuda") in `dtype`, from a world
// of one process joined for the run (both devices' runs share the init: vescale::random's
// stream, the same bits on CPU and GPU).
std::vector<double> loss_curve(const std::string& device, const std::string& dtype) {
  dist::init({.device = device});
  std::vector<double> losses;
  {
    auto mesh = mesh::DeviceMesh::init({{"dp", 1}});
    auto cfg = train::Config::from_file(
        VESCALE_SOURCE_DIR "/configs/llama_tiny.json",
        {"train.steps=" + std::to_string(kSteps), "train.dtype=\"" + dtype + "\"",
         "train.peak_flops=0", "log.metrics_jsonl=\"\""});
    train::Trainer trainer(cfg, mesh);
    for (const auto& m : trainer.run()) losses.push_back(m.loss);
  }
  dist::shutdown();
  return losses;
}

// The reference, once per process.
const std::vector<double>& cpu_fp32() {
  static const std::vector<double> curve = loss_curve("cpu", "fp32");
  return curve;
}

double mean(const std::vector<double>& v, size_t from, size_t n) {
  double s = 0;
  for (size_t i = from; i < from + n; ++i) s += v[i];
  return s / static_cast<double>(n);
}

}  // namespace

TEST_CASE("llama_tiny in fp32 on the GPU has the CPU's loss curve within 1e-4", "[train]") {
  const auto& cpu = cpu_fp32();
  REQUIRE(cpu.size() == static_cast<size_t>(kSteps));
  for (double l : cpu) CHECK(std::isfinite(l));
  CHECK(mean(cpu, kSteps - 5, 5) < mean(cpu, 0, 5));  // the reference learns
  VESCALE_GPU_HALF();
  const auto gpu = loss_curve("cuda", "fp32");
  REQUIRE(gpu.size() == cpu.size());
  for (size_t s = 0; s < cpu.size(); ++s) {
    INFO("step " << s + 1 << ": cpu " << cpu[s] << ", gpu " << gpu[s]);
    CHECK(std::abs(gpu[s] - cpu[s]) <= 1e-4 * std::abs(cpu[s]));
  }
}

TEST_CASE("llama_tiny in bf16 on the GPU follows the fp32 loss curve within 2% and falls",
          "[train]") {
  const auto& fp32 = cpu_fp32();  // the GPU's fp32 curve, by the case above
  REQUIRE(fp32.size() == static_cast<size_t>(kSteps));
  VESCALE_GPU_HALF();
  const auto bf16 = loss_curve("cuda", "bf16");
  REQUIRE(bf16.size() == fp32.size());
  for (size_t s = 0; s < fp32.size(); ++s) {
    INFO("step " << s + 1 << ": fp32 " << fp32[s] << ", bf16 " << bf16[s]);
    CHECK(std::isfinite(bf16[s]));
    CHECK(std::abs(bf16[s] - fp32[s]) <= 0.02 * fp32[s]);
  }
  CHECK(mean(bf16, kSteps - 5, 5) < mean(bf16, 0, 5));
  CHECK(bf16.back() < bf16.front());
}
