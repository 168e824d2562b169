// The gradient layout of a model on a mesh (docs/parallel.md): which parameters' gradients need
// a reduction, over which mesh dims, packed into which flat buckets, and under ZeRO the slice
// of each bucket this rank owns. Built once from the parameters' placements and the plan,
// before step 1, for every layout (ZeRO 0-3, each pipeline stage): the GradReducer reduces by
// it, ShardedAdamW steps its slices, ShardedParameters (ZeRO-3) keeps each unit's slices.
//
// A gradient comes out of backward Partial where its parameter is Replicate on a dim whose
// ranks see other tokens: the reduction dims (the plan's grad_reduce.dims, else the mesh's data
// dims, ParallelDims). On a tensor dim it is Partial for a Replicate parameter of a module the
// plan feeds sequence shards ("forward" inputs Shard there: sequence-parallel norms), and for
// the router of a mixture-of-experts layer whose experts are sharded there (their outputs stay
// Partial until the layer's all-reduce). That is the expected gradient placement of each
// parameter; one that arrives otherwise is redistributed to it first (GradReducer).
//
// Buckets hold gradients of one (dtype, reduction dims, reduce op, ZeRO-3 unit), in reverse
// registration order (about the order backward produces them), at most bucket_mb each (a
// bigger single gradient gets its own). Not collective; plain data once built.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vescale/dist/process_group.h"
#include "vescale/dtensor/placement.h"
#include "vescale/mesh/device_mesh.h"

namespace torch::nn {
class Module;
}
namespace vescale::plan {
class Plan;
struct GradReduce;
}  // namespace vescale::plan

namespace vescale::parallel {

struct GradLayoutOptions {
  double bucket_mb = 25;  // MiB of gradient per bucket
  bool fused = true;      // one collective over a bucket's dim set instead of one per dim
  // ZeRO stage: >= 1 cuts each bucket into equal slices over its shard group (the group of its
  // first collective), one per rank; 3 also groups the parameters into units.
  int zero = 0;
  // ZeRO-3's units (FSDP's wrap policy): the outermost modules whose FQN matches this pattern
  // (e.g. "layers.*": layers.0, layers.1, ...) each gather their parameters on their own; the
  // rest belongs to the root unit 0. Buckets never mix units. Empty: one unit.
  std::string unit_pattern;
  // The reduction dims (mesh dim names). Empty: the plan's grad_reduce.dims, else the mesh's
  // data dims (plan::ParallelDims).
  std::vector<std::string> dims;
  static GradLayoutOptions from_plan(const plan::GradReduce& g);
};

struct LayoutParam {
  std::string name;
  at::Tensor tensor;    // the parameter (a DTensor)
  int64_t bucket = -1;  // -1: in no bucket (its gradient needs no reduction)
  int64_t offset = 0, numel = 0;  // in its bucket, of its local shard
  std::vector<int64_t> local_shape;
  // Its gradient as the bucket takes it: the parameter's placements, Partial on the dims its
  // bucket reduces over (after the reduction it has the parameter's placements).
  dtensor::Placements grad_placements;
  int64_t unit = 0;
};

// The part of one parameter inside a rank's slice of a bucket.
struct Segment {
  size_t param;          // index into GradLayout::params()
  int64_t param_offset;  // into the parameter's flattened local shard
  int64_t shard_offset;  // into the slice
  int64_t numel;
};

struct LayoutBucket {
  c10::ScalarType dtype;
  std::vector<int64_t> dims;  // mesh dim indices reduced over, ascending
  dist::ReduceOp op = dist::ReduceOp::Sum;
  std::vector<size_t> params;  // in the order they sit in the bucket
  int64_t unit = 0;
  int64_t numel = 0;
  // ZeRO (zero >= 1): numel rounded up to the shard group's size; padded / group size; this
  // rank's place in the group, its slice [shard_rank * chunk, +chunk) and the segments in it.
  int64_t padded = 0, chunk = 0;
  int shard_rank = 0;
  std::vector<Segment> segments;
};

class GradLayout {
 public:
  // Every DTensor parameter of `model` that requires a gradient, on `mesh` (the model's, or a
  // pipeline stage's). Not collective. Throws for a reduction dim the mesh lacks or a
  // unit_pattern that matches no module.
  GradLayout(torch::nn::Module& model, const mesh::DeviceMesh& mesh, const plan::Plan& plan,
             GradLayoutOptions options);

  const mesh::DeviceMesh& mesh() const { return mesh_; }
  const GradLayoutOptions& options() const { return options_; }
  const std::vector<LayoutParam>& params() const { return params_; }
  const std::vector<LayoutBucket>& buckets() const { return buckets_; }
  // ZeRO-3: unit u's module is unit_modules()[u - 1]; unit 0 is the rest.
  const std::vector<std::shared_ptr<torch::nn::Module>>& unit_modules() const {
    return unit_modules_;
  }
  int64_t num_units() const { return static_cast<int64_t>(unit_modules_.size()); }

  // The group of a bucket's first collective: all its dims when fused, else the first one.
  // ZeRO slices the bucket over it.
  dist::ProcessGroup& shard_group(const LayoutBucket& b) const;
  // The mesh dims a slice's values are summed over for a norm: the shard group's dims, and
  // those the parameter is sharded on.
  std::vector<int64_t> norm_dims(const LayoutBucket& b, const LayoutParam& p) const;
  std::vector<std::string> dim_names(const std::vector<int64_t>& dims) const;

  // One line per bucket ("bucket 0: fp32 over dp (fused), 12 params, 1.50 MiB"), its ZeRO
  // slice, and the parameters in none.
  std::string describe() const;

 private:
  void place_buckets();
  void slice_buckets();

  mesh::DeviceMesh mesh_;
  GradLayoutOptions options_;
  std::vector<LayoutParam> params_;
  std::vector<LayoutBucket> buckets_;
  std::vector<std::shared_ptr<torch::nn::Module>> unit_modules_;
  std::string notes_;  // for describe()
};

}  // namespace vescale::parallel
