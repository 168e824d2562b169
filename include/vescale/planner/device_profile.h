// A device as the planner's cost model sees it (docs/planner.md): its dense peak, how much of
// it a GEMM of a given size achieves, its memory and memory bandwidth, and the two link classes
// a collective can run over (within a node, across nodes). Shipped profiles are data
// (configs/devices/*.json, each figure with its source); `vescale-plan --calibrate` writes one
// measured on the machine it runs on.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vescale::planner {

struct Link {
  double bandwidth = 0;  // bytes/s one rank sends (and receives) at once over this link class
  double latency = 0;    // seconds per message step of a collective
};

struct DeviceProfile {
  std::string name;
  double peak_flops = 0;       // dense, the training dtype's (bf16 on GPUs), per device
  double memory_bytes = 0;     // what a rank may hold
  double memory_bandwidth = 0; // bytes/s: elementwise ops, norms, the optimizer
  // Achieved GEMM FLOP/s = peak x gemm_efficiency x w / (w + gemm_half_work), with w a GEMM's
  // multiply-adds (m x n x k): large GEMMs reach gemm_efficiency of the peak, a GEMM of
  // gemm_half_work multiply-adds half of that.
  double gemm_efficiency = 0.7;
  double gemm_half_work = 1e9;
  // Seconds each framework operation costs beyond its work (dispatch, kernel launch): what a
  // step of many small operations is bound by. Optional in a profile (0).
  double op_overhead = 0;
  Link intra_node, inter_node;
  int64_t gpus_per_node = 8;
  // Where each figure comes from: field -> source.
  std::map<std::string, std::string> sources;

  double gemm_flops(double work) const {
    return peak_flops * gemm_efficiency * work / (work + gemm_half_work);
  }
};

// A shipped profile by name ("h100", "h200", "a100", "b200", "cpu") or a JSON file's path.
// Throws naming the names it knows, or the file's bad field.
DeviceProfile device_profile(const std::string& name_or_path);
// The shipped profiles' names, sorted.
std::vector<std::string> device_profile_names();
// A profile as JSON (the shipped files' format), and back.
std::string to_json(const DeviceProfile& p);
DeviceProfile device_profile_from_json(const std::string& text, const std::string& source);

}  // namespace vescale::planner
