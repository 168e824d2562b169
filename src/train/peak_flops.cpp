#include "vescale/train/peak_flops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "vescale/dist/cuda_device.h"

namespace vescale::train {

std::optional<double> gpu_peak_flops(const std::string& name, DType dtype) {
  struct Peak {
    const char* match;  // all of these words in the device name
    const char* also;   // and this one ("" for none)
    double bf16, fp32;  // dense FLOP/s; 0: not in the datasheet
  };
  // NVIDIA datasheets (docs/train.md cites each); the halves of their "with sparsity" figures.
  static const Peak table[] = {
      {"H100", "NVL", 835e12, 60e12}, {"H100", "PCIe", 756e12, 51e12},
      {"H100", "", 989e12, 67e12},    {"H200", "NVL", 835e12, 60e12},
      {"H200", "", 989e12, 67e12},    {"A100", "", 312e12, 19.5e12},
      {"B200", "", 2250e12, 0},       {"L40S", "", 362e12, 91.6e12},
  };
  for (const auto& p : table) {
    if (name.find(p.match) == std::string::npos) continue;
    if (*p.also && name.find(p.also) == std::string::npos) continue;
    const double v = dtype == DType::Bf16 ? p.bf16 : p.fp32;
    if (v > 0) return v;
    return std::nullopt;
  }
  return std::nullopt;
}

double measured_gemm_peak(double seconds) {
  static std::mutex mu;
  static std::map<int, double> measured;  // by thread count
  std::lock_guard<std::mutex> lock(mu);
  const int threads = at::get_num_threads();
  if (auto it = measured.find(threads); it != measured.end()) return it->second;
  c10::NoGradGuard no_grad;
  const int64_t n = 1024;
  // Not randn: the measurement must leave libtorch's generator alone (bitwise resume).
  auto a = at::full({n, n}, 0.5), b = at::full({n, n}, 0.25), c = at::empty({n, n});
  at::mm_out(c, a, b);  // warm-up
  double best = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do {
    const auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / s);
  } while (std::chrono::steady_clock::now() < until);
  measured[threads] = best;
  return best;
}

PeakFlops resolve_peak_flops(const TrainConfig& train, const std::string& device) {
  char line[256];
  if (!train.peak_flops.is_auto) {
    if (train.peak_flops.value <= 0) return {0, "", ""};
    std::snprintf(line, sizeof(line), "MFU vs train.peak_flops = %.3g FLOP/s per device",
                  train.peak_flops.value);
    return {train.peak_flops.value, "", line};
  }
  if (device.rfind("cuda", 0) == 0) {
    const std::string name = dist::cuda_device_name();
    if (auto p = gpu_peak_flops(name, train.dtype)) {
      std::snprintf(line, sizeof(line),
                    "MFU vs %s's dense %s peak, %.4g TFLOP/s (train.peak_flops: auto)",
                    name.c_str(), to_string(train.dtype), *p / 1e12);
      return {*p, "", line};
    }
    return {0, "",
            "train.peak_flops: auto knows no " + std::string(to_string(train.dtype)) + " peak for '" + name +
                "'; no MFU. Set train.peak_flops to the device's dense peak FLOP/s"};
  }
  const double p = measured_gemm_peak();
  std::snprintf(line, sizeof(line),
                "MFU vs measured GEMM peak: %.3g FLOP/s (fp32 1024^3 on %d thread%s; "
                "train.peak_flops: auto)",
                p, at::get_num_threads(), at::get_num_threads() == 1 ? "" : "s");
  return {p, "vs measured GEMM peak", line};
}

}  // namespace vescale::train
