// Bucketed, overlapped, N-D fused gradient reduction by a GradLayout (docs/parallel.md).
//
// A hook on each bucketed parameter (after AccumulateGrad) marks it ready; when a bucket's last
// gradient is ready its local shards are copied into the flat bucket and ONE async collective
// is launched while backward goes on (buckets sharing a group launch in bucket order on every
// rank, so their collectives match up). finish() launches the rest, waits, and hands the
// result back: at ZeRO 0 every parameter gets its reduced gradient as a DTensor with its own
// placements; at ZeRO 1 and 2 each rank keeps only the reduced slice of each bucket that it
// owns (reduced_slice(), for ShardedAdamW; 1 all-reduces, 2 reduce-scatters and drops the
// full gradients as soon as their bucket is sent). A gradient that arrives in other placements
// than its bucket expects is redistributed to them first (one collective, a "fallback", unless
// it is a local slice); one outside every bucket whose placements differ from its parameter's
// is redistributed on its own in finish(). With fused (the default) a bucket reduced over
// several dims makes one collective over all of them; unfused makes one per dim.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "vescale/parallel/grad_layout.h"

namespace vescale::parallel {

struct GradReducerOptions {
  bool overlap = true;       // launch each bucket from backward; false: all of them in finish()
  bool reduce_bf16 = false;  // fp32 gradients travel as bf16 (half the bytes, bf16 rounding)
};

// What the reducer sent, for tests and benchmarks.
struct ReduceStats {
  int64_t collectives = 0;  // collectives launched (buckets, and fallback redistributions)
  int64_t bytes = 0;        // bytes of the buffers they reduced (per rank)
  int64_t buckets = 0;      // buckets reduced
  int64_t fallbacks = 0;    // gradients redistributed one by one (over the network)
  int64_t overlapped = 0;   // buckets launched from backward's hooks (the rest start in finish())
};

class GradReducer {
 public:
  // Installs a post-accumulate-grad hook on every parameter of the layout. `layout` must
  // outlive the reducer.
  GradReducer(const GradLayout& layout, GradReducerOptions options = {});
  ~GradReducer();  // removes the hooks
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // sync=false (no_sync, for the first micro-batches of an accumulation): backward only
  // accumulates the Partial gradients locally; the next synced backward reduces the sum.
  void set_sync(bool sync);
  bool sync() const;

  // After a synced backward: launches what is left, waits for every collective (with its
  // group's timeout), and hands back the result (see above). Collective. Returns this step's
  // stats.
  ReduceStats finish();

  // ZeRO 1/2: this rank's slice of bucket k's reduced gradient (layout().buckets()[k].chunk
  // elements, the bucket's dtype) after finish(); undefined before, and after drop_slices().
  // Scaling it in place (clipping) scales what the optimizer reads.
  at::Tensor reduced_slice(size_t k) const;
  void drop_slices();  // frees them (the optimizer's zero_grad)

  const GradLayout& layout() const;
  const ReduceStats& last_step() const;  // of the last finish()
  const ReduceStats& total() const;      // since construction

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;  // shared with the hooks, which hold it weakly
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
