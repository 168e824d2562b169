// DTensor: an at::Tensor that is globally one tensor and locally a shard on each rank.
// Plain model code runs on it unchanged: every aten op reaches one dispatcher fallback that
// propagates the sharding, redistributes inputs where the op needs it, and runs the op on the
// local shards (docs/dtensor.md). sizes() is the global shape; device() reports "dtensor:0".
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "vescale/dtensor/dtensor_spec.h"
#include "vescale/dtensor/placement.h"
#include "vescale/mesh/device_mesh.h"

namespace vescale::dtensor {

bool is_dtensor(const at::Tensor& t);
// The spec of a DTensor; throws for a plain tensor.
const DTensorSpec& spec_of(const at::Tensor& t);

// From a full tensor that every rank holds (src_rank < 0), or that only the mesh's rank src_rank
// holds (its linear index in the mesh; the others pass a tensor of the same shape and dtype; it is
// broadcast over the mesh first).
// The result is a leaf (as in PyTorch) that requires grad if `full` does.
at::Tensor distribute_tensor(const at::Tensor& full, const mesh::DeviceMesh& mesh,
                             Placements placements, int src_rank = -1);

// From this rank's shard. The global shape is `shape` if given; otherwise it is inferred by
// gathering the local sizes along the sharded mesh dims (a collective). Differentiable.
at::Tensor from_local(const at::Tensor& local, const mesh::DeviceMesh& mesh, Placements placements,
                      std::optional<std::vector<int64_t>> shape = std::nullopt);

// Turns the plain tensor `t` itself into the DTensor `dtensor` (same global shape and dtype):
// every handle to t's TensorImpl (a module's `weight` member, its parameter dict) then sees
// the DTensor, and t keeps its autograd identity (leaf, requires_grad). parallelize() uses
// it on parameters, which must not have a gradient yet.
void become_dtensor(const at::Tensor& t, const at::Tensor& dtensor);
// The reverse: the DTensor `t` itself becomes its local shard, a plain tensor sharing the
// shard's storage, keeping its autograd identity. parallelize() uses it on a 1-device mesh,
// where the local shard is the whole tensor and DTensor dispatch would only cost time.
void become_local(const at::Tensor& t);

// This rank's shard as a plain tensor. Differentiable.
at::Tensor to_local(const at::Tensor& dtensor);
// The same, with the placements its gradient has (PyTorch's grad_placements): local code that
// uses a Replicate tensor with other ranks' data yields a gradient Partial on those dims.
at::Tensor to_local(const at::Tensor& dtensor, Placements grad_placements);

// The whole tensor on every rank (redistributed to Replicate). Differentiable.
at::Tensor full_tensor(const at::Tensor& dtensor);

// The same global tensor with other placements; collectives as needed. Differentiable: the
// gradient goes back through the reverse redistribution.
at::Tensor redistribute(const at::Tensor& dtensor, Placements placements);

// One line for logs: "DTensor([4, 3], Float, [Shard(0)] on DeviceMesh(x=2; rank 1 at [1]), local
// [2, 3])". Not collective. (Printing a DTensor with << needs its values: use full_tensor, on every
// rank.)
std::string describe(const at::Tensor& dtensor);

// Process-wide. Factory calls that name the dtensor device but have no DTensor input
// (torch::ones(n, x.options())) create Replicate DTensors on this mesh. Set automatically by the
// first DTensor made.
void set_default_mesh(const mesh::DeviceMesh& mesh);

// Process-wide. Ops without a sharding rule fail naming the op and its input specs. With this on,
// they instead gather every input to Replicate, run, and return Replicate outputs, warning once per
// op. Also on when VESCALE_DTENSOR_REPLICATE_FALLBACK=1.
void set_replicate_fallback(bool on);

// Static eager (docs/dtensor.md): the first step records, per thread and in call order, what the
// dispatcher decided for each op; later steps replay it by position, checking only that each
// call has the recorded op, input specs and arguments. A call that differs (new shapes, other
// placements) runs eagerly and records anew from there. Call static_eager_step() at the start
// of every training step so the replay restarts at the first call. Process-wide switch; the
// tapes are per thread.
void set_static_eager(bool on);
bool static_eager();
void static_eager_step();
struct StaticEagerStats {
  int64_t replayed = 0;  // calls served from the record
  int64_t recorded = 0;  // calls recorded (the first step, and after a divergence)
  int64_t diverged = 0;  // calls that differed from the record at their position
};
StaticEagerStats static_eager_stats();

// While one lives, autograd runs backward on the thread that calls it (RAII; it restores the
// previous setting). libtorch runs the backward of every non-CPU device on that device's worker
// thread while the caller waits; DTensors report the "dtensor" device, so without this each
// backward hands its nodes to that thread and back, which only adds thread switches (the
// local kernels run on the CPU or enqueue CUDA work either way). The trainer holds one.
class BackwardOnCallerThread {
 public:
  BackwardOnCallerThread();
  ~BackwardOnCallerThread();
  BackwardOnCallerThread(const BackwardOnCallerThread&) = delete;
  BackwardOnCallerThread& operator=(const BackwardOnCallerThread&) = delete;

 private:
  bool previous_;
};

// Counters of the dispatcher fallback, for tests and benchmarks.
struct DispatchStats {
  int64_t calls = 0;
  int64_t cache_hits = 0;       // propagation results reused
  int64_t bypasses = 0;         // all-Replicate calls that needed no rule
  int64_t redistributions = 0;  // inputs moved to other placements inside ops
  int64_t in_place_sums = 0;    // add_ of two DTensors laid out alike, on the shards directly
                                // (the autograd engine's in-place gradient sums among them)
};
DispatchStats dispatch_stats();
void reset_dispatch_stats();
// Where a model's redistributions come from: while on, every redistribution (inside an op, by
// redistribute(), or of a gradient in backward) is counted under a label such as
// "aten::mm arg 1: Shard(1) -> Replicate" or "redistribute backward: Partial(sum) -> Replicate".
// Turning it on clears the counts. Off by default (it takes a lock per redistribution).
void set_redistribution_log(bool on);
std::map<std::string, int64_t> redistribution_log();
// Drops this thread's propagation cache (benchmarks of the miss path).
void clear_propagation_cache();

}  // namespace vescale::dtensor
