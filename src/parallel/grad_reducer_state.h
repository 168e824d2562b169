// The GradReducer's bucket layout and per-step state, shared by the reducer (grad_reducer.cpp)
// and the ZeRO optimizer that steps the buckets' slices (zero_optimizer.cpp). Internal.
#pragma once
#include <ATen/core/Tensor.h>

#include <deque>
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vescale/parallel/grad_reducer.h"
#include "vescale/dist/process_group.h"
#include "vescale/dtensor/placement.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel {

struct ReducerParam {
  std::string name;
  at::Tensor tensor;
  int64_t bucket = -1;  // -1: in no bucket (needs nothing, or the per-parameter fallback)
  int64_t offset = 0, numel = 0;
  std::vector<int64_t> local_shape;
  dtensor::Placements grad_placements;     // what its gradient arrives as (bucketed params)
  dtensor::Placements reduced_placements;  // after the bucket's all-reduce (Partial -> Replicate)
  bool ready = false;                      // its gradient for this step is accumulated
  int64_t unit = 0;                        // buckets never mix units (ZeRO-3 gathers per unit)
};

// Under ZeRO a rank owns one equal slice of each (padded) bucket: [shard_rank * chunk, +chunk).
// A segment is the part of one parameter inside that slice.
struct Segment {
  size_t param;          // index into State::params
  int64_t param_offset;  // into the parameter's flattened local tensor
  int64_t shard_offset;  // into the slice
  int64_t numel;
};

struct Bucket {
  c10::ScalarType dtype;
  std::vector<int64_t> dims;  // mesh dim indices reduced over
  dist::ReduceOp op;
  std::vector<size_t> params;
  int64_t unit = 0;  // the ZeRO-3 unit of all its params
  int64_t numel = 0;
  int64_t pending = 0;  // params not ready yet this step
  bool launched = false;
  std::string sequence;  // the group of its first collective: launches keep bucket order there
  at::Tensor flat;       // the step's gradients (stage 0/1); ZeRO 2+ drops it once scattered
  dist::Work work;
  // ZeRO (stage >= 1): the slice this rank owns over the shard group (the bucket's first group).
  int64_t padded = 0, chunk = 0;  // numel rounded up to the group size; padded / group size
  int shard_rank = 0;
  std::vector<Segment> segments;
  at::Tensor grad_shard;  // the reduced gradient of the slice, after finish()
};

struct GradReducer::State {
  mesh::DeviceMesh mesh;
  // ZeRO-3 units: unit_modules[u - 1] is unit u's module; unit 0 is the root (the rest).
  std::vector<std::shared_ptr<torch::nn::Module>> unit_modules;
  std::function<void(size_t bucket)> on_bucket_sent;  // ZeroOptimizer's, called under mu
  GradReducerOptions options;
  std::vector<ReducerParam> params;
  std::vector<Bucket> buckets;
  std::map<std::string, size_t> next_launch;  // per sequence: the next bucket index to launch
  std::deque<size_t> inflight;                // ZeRO 2+: reduce-scatters not waited on yet
  bool layout_built = false;
  std::string fallback_notes;  // for describe()
  bool sync = true;
  ReduceStats current, last, total;
  std::mutex mu;

  std::vector<std::string> dim_names(const std::vector<int64_t>& dims) const;
  // The group of a bucket's first collective: all its dims fused, else the first one. Under
  // ZeRO the bucket is sliced over this group.
  dist::ProcessGroup& first_group(const Bucket& b) const;
  c10::ScalarType wire_dtype(const Bucket& b) const;  // what the collective carries

  void on_grad(size_t i);
  void build_layout();         // from the first step's gradients
  void build_static_layout();  // ZeRO-3: from the parameters' placements, before any step
  void slice_buckets();        // ZeRO: each rank's slice of every bucket
  // Adds parameter k to the open bucket of `key` (opening one if it would pass the cap).
  void place(size_t k, c10::ScalarType dtype, const std::vector<int64_t>& dims, dist::ReduceOp op,
             std::map<std::tuple<c10::ScalarType, std::vector<int64_t>, dist::ReduceOp, int64_t>,
                      int64_t>& open);
  void launch(Bucket& b, bool in_backward);
  void launch_ready(const std::string& sequence);
  void count(const at::Tensor& flat);
};

}  // namespace vescale::parallel
