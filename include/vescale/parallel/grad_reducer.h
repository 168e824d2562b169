// Bucketed, overlapped, N-D fused gradient reduction (docs/parallel.md, docs/parallel.md).
//
// A parameter whose gradient comes out of backward Partial on some mesh dims where the
// parameter is Replicate (dp for data parallelism; also tp for sequence-parallel norm weights)
// needs a reduction over those dims. (A gradient Partial where its parameter is Shard, or
// Replicate where it is Shard, is all-reduced too and then sliced locally; one sharded along
// another tensor dim than its parameter is redistributed on its own, a "fallback".) The GradReducer
// packs such gradients into flat buckets of about bucket_mb, in reverse order of registration, one
// bucket list per (dtype, dims, op). A hook on each parameter (after AccumulateGrad) marks it
// ready; when a bucket's last gradient is ready its local shards are copied into the bucket and ONE
// async all-reduce is launched, while backward goes on. finish() waits and hands each parameter its
// reduced gradient back as a DTensor with the parameter's placements.
//
// With fused (the default), a bucket reduced over several dims makes one collective on the
// group over all of them; unfused makes one per dim (for comparison).
//
// The bucket layout is built from the gradients of the first step (their placements say what
// each needs); that step reduces all buckets in finish(). Every rank must run the same graph.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace torch::nn {
class Module;
}

namespace vescale::parallel {

struct GradReducerOptions {
  double bucket_mb = 25;  // MiB of gradient per bucket (a bigger single gradient gets its own)
  bool fused = true;      // one collective over a bucket's dim set instead of one per dim
  bool overlap = true;    // launch each bucket from backward; false: all of them in finish()
  // ZeRO stage: 0 all-reduces each bucket and sets every grad; 1 and 2 leave each rank the
  // reduced slice it owns for ZeroOptimizer (1 all-reduces, 2 reduce-scatters and frees the
  // full gradients as soon as their bucket is sent). Stage 3 is ZeroOptimizer's (zero_optimizer.h).
  int zero = 0;
  // Stage 3's units (FSDP's wrap policy): the outermost modules whose FQN matches this pattern
  // (e.g. "layers.*": layers.0, layers.1, ...) each gather their parameters on their own; the
  // rest belongs to the root unit.
  // Buckets never mix units. Empty: one unit.
  std::string unit_pattern = "";
  // Stage 3 lays its buckets out before the first step (the parameters must be slices before
  // their first use): the gradients of parameters Replicate on these mesh dims are taken to be
  // Partial there (any other reduction is done per gradient first). Empty: "dp".
  std::vector<std::string> dims = {};
  bool reduce_bf16 = false;  // fp32 gradients travel as bf16 (half the bytes, bf16 rounding)
  static GradReducerOptions from_plan(const plan::GradReduce& g) {
    GradReducerOptions o;
    o.bucket_mb = g.bucket_mb;
    o.fused = g.fused;
    o.dims = g.dims;
    return o;
  }
};

// What the reducer sent, for tests and benchmarks.
struct ReduceStats {
  int64_t collectives =
      0;                   // collectives launched (bucket all-reduces and fallback redistributions)
  int64_t bytes = 0;       // bytes of the buffers they reduced (per rank)
  int64_t buckets = 0;     // buckets reduced
  int64_t fallbacks = 0;   // gradients outside any bucket, redistributed one by one
  int64_t overlapped = 0;  // buckets launched from backward's hooks (the rest start in finish())
};

class GradReducer {
 public:
  // Installs a post-accumulate-grad hook on every DTensor parameter of `model`.
  GradReducer(torch::nn::Module& model, const mesh::DeviceMesh& mesh,
              GradReducerOptions options = {});
  ~GradReducer();  // removes the hooks
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // sync=false (no_sync, for the first micro-batches of an accumulation): backward only
  // accumulates the Partial gradients locally; the next synced backward reduces the sum.
  void set_sync(bool sync);
  bool sync() const;

  // After a synced backward: launches what is left, waits for every collective (with its
  // group's timeout), and sets each reduced parameter's grad. Returns this step's stats.
  ReduceStats finish();

  const ReduceStats& last_step() const;  // of the last finish()
  const ReduceStats& total() const;      // since construction
  int64_t num_buckets() const;           // 0 until the first finish() built the layout
  int64_t num_units() const;             // ZeRO-3 units besides the root (0 without unit_pattern)
  // One line per bucket: "bucket 0: fp32 over dp (fused), 12 params, 1.50 MiB".
  std::string describe() const;

  struct State;
  State& state() { return *state_; }  // the layout, for ZeroOptimizer

 private:
  std::shared_ptr<State> state_;
};

// RAII no_sync: backward inside the scope does not reduce.
class NoSync {
 public:
  explicit NoSync(GradReducer& r) : r_(r), was_(r.sync()) { r_.set_sync(false); }
  ~NoSync() { r_.set_sync(was_); }
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;

 private:
  GradReducer& r_;
  bool was_;
};

}  // namespace vescale::parallel
