// vescale-plan --calibrate: a device profile measured on the machine it runs on, for the cost
// model (docs/planner.md): the GEMM curve (square GEMMs of growing size, fitted to
// peak x w / (w + w_half)), the per-operation cost and the elementwise rate (from blocks run as
// training runs them), and, when launched with several ranks, each collective's bandwidth and
// latency over the world (fitted to its formula) and what overlapped traffic costs the compute.
// On one host both link classes get the measured link.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vescale/planner/device_profile.h"
#include "vescale/train/config.h"

namespace vescale::planner {

// (multiply-adds of a GEMM, achieved FLOP/s) -> the peak and the half-work point of
// rate = peak x w / (w + half): for each half on a log grid the least-squares peak, the half
// with the least squared error. Throws for fewer than two points.
std::pair<double, double> fit_gemm_curve(const std::vector<std::pair<double, double>>& points);

// (size, seconds) -> (intercept, slope) of time = intercept + slope x size, least squares on
// the relative error (the intercept clamped at 0). Throws for fewer than two points or a
// non-positive slope.
std::pair<double, double> fit_line(const std::vector<std::pair<double, double>>& points);

// (V bytes, seconds) of collective `c` over `ranks` -> its link figures: time =
// passes x ((n-1)/n V/B + (n-1) a) (collective_s), fitted as a line in V (fit_line).
LinkFigures fit_collective(Collective c, const std::vector<std::pair<double, double>>& points,
                           int64_t ranks);

// Measures this process's device ("cpu" or "cuda"); collective when the world has several ranks
// (every rank calls it). `name` becomes the profile's name. With `model` (the config to be
// planned), a CPU's elementwise rate is read from that model's own block when it is small
// enough to time here, as profiling planners read their model's layers; else from a generic
// LLaMA block.
DeviceProfile calibrate(const std::string& name, const std::string& device,
                        const train::Config* model = nullptr);

}  // namespace vescale::planner
