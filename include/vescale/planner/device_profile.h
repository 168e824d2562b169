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

// The collectives the cost model times (cost_model.h has each one's formula).
enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll };
const char* to_string(Collective c);  // "all_reduce", ...
inline constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::AllGather,
                                              Collective::ReduceScatter, Collective::AllToAll};

struct LinkFigures {
  double bandwidth = 0;  // bytes/s one rank sends (and receives) at once over this link class
  double latency = 0;    // seconds per message step of a collective
};

struct Link : LinkFigures {
  Link() = default;
  Link(double bandwidth_, double latency_) : LinkFigures{bandwidth_, latency_} {}
  // Figures fitted to one collective's own formula where it was measured (a backend's
  // reduce-scatter or all-gather need not run at its all-reduce's rate); the others use the
  // link's. Optional in a profile.
  std::map<Collective, LinkFigures> measured;
  LinkFigures of(Collective c) const {
    const auto it = measured.find(c);
    return it == measured.end() ? LinkFigures{bandwidth, latency} : it->second;
  }
};

struct DeviceProfile {
  std::string name;
  double peak_flops = 0;  // dense bf16 (the low-precision training dtype), per device
  // Dense fp32 (what an fp32 config's GEMMs run at; libtorch leaves TF32 off). Optional in a
  // profile: 0 means not known, and planning an fp32 config throws. A CPU's calibration
  // measures fp32 and gives both fields that figure.
  double fp32_peak_flops = 0;
  double memory_bytes = 0;     // what a rank may hold
  double memory_bandwidth = 0; // bytes/s: elementwise ops, norms, the optimizer
  // Whether attention keeps its probabilities (our CPU kernel) rather than recomputing them
  // tile by tile (flash attention on GPUs): their traffic counts as elementwise. Optional (false).
  bool attention_keeps_probabilities = false;
  // Achieved GEMM FLOP/s = peak x gemm_efficiency x w / (w + gemm_half_work), with w a GEMM's
  // multiply-adds (m x n x k): large GEMMs reach gemm_efficiency of the peak, a GEMM of
  // gemm_half_work multiply-adds half of that.
  double gemm_efficiency = 0.7;
  double gemm_half_work = 1e9;
  // Seconds each framework operation costs beyond its work (dispatch, kernel launch): what a
  // step of many small operations is bound by. Optional in a profile (0).
  double op_overhead = 0;
  // Ranks per core where ranks share cores (a CPU test bed launched with more ranks than
  // cores: the rates above were measured with every rank running at once, so a rank idle in a
  // pipeline's bubble lends its share to the others). Optional; 0 or 1: a device per rank.
  double ranks_per_core = 0;
  // The share of communication overlapped with compute that the compute still pays for: on a
  // CPU the collective's copies and reductions run on the cores the compute needs (measured by
  // --calibrate); on a GPU NCCL's kernels take a few SMs (not modelled: 0). Optional (0).
  double overlap_cost = 0;
  // Seconds a blocking collective between computations (a TP all-reduce, an EP all-to-all, the
  // loss's count) waits beyond its link time: its peers' skew and, on a CPU, the scheduler
  // waking the communication threads beside the compute. Read by --calibrate from the planned
  // model's block under tensor parallelism. Optional (0: a GPU's NCCL kernels start at once).
  double collective_wait = 0;
  Link intra_node, inter_node;
  int64_t gpus_per_node = 8;
  // Where each figure comes from: field -> source.
  std::map<std::string, std::string> sources;

  // The dense peak of the training dtype. Throws for fp32 when the profile has none.
  double peak(bool fp32) const;
  // Achieved GEMM FLOP/s at `work` multiply-adds, in fp32 or bf16.
  double gemm_flops(double work, bool fp32) const {
    return peak(fp32) * gemm_efficiency * work / (work + gemm_half_work);
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
