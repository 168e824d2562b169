// The peak FLOP/s that MFU divides by (train.peak_flops, docs/train.md "MFU").
#pragma once
#include <optional>
#include <string>

#include "vescale/train/config.h"

namespace vescale::train {

// A GPU's dense (no sparsity) peak for the training dtype (bf16: tensor cores; fp32: the plain
// FP32 rate, libtorch leaving TF32 off), from NVIDIA's datasheets: A100, H100 SXM / PCIe / NVL,
// H200, B200, L40S. nullopt for a GPU the table lacks.
std::optional<double> gpu_peak_flops(const std::string& device_name, DType dtype);

// FLOP/s of a large fp32 GEMM on this thread's libtorch threads: the best of repeated
// 1024 x 1024 products for about `seconds`. Measured once per process and thread count.
double measured_gemm_peak(double seconds = 0.15);

struct PeakFlops {
  double flops = 0;   // 0: no MFU
  std::string label;  // after "MFU x%": "" for a table or a number, "vs measured GEMM peak"
  std::string note;   // one line for the log: where the number came from, or why there is none
};
// train.peak_flops resolved for `device` ("cpu", "cuda"): a number as given; "auto" as above.
PeakFlops resolve_peak_flops(const TrainConfig& train, const std::string& device);

}  // namespace vescale::train
