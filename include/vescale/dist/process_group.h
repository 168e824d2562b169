// A process group and its collectives. Every call is asynchronous and returns a Work handle;
// every wait has a timeout, so a hung or dead peer becomes a TimeoutError, never a hang.
// Tensors must be contiguous and, for NCCL groups, on this rank's CUDA device.
#pragma once
#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "vescale/dist/reduce_op.h"

namespace vescale::dist {

enum class Backend { Gloo, Nccl };

const char* to_string(Backend b);

// The pending result of a collective.
class Work {
 public:
  Work();  // already complete
  // Blocks until done or the group's timeout passes; then throws TimeoutError.
  void wait();
  void wait(std::chrono::milliseconds timeout);
  bool is_completed() const;

  struct Impl;
  explicit Work(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

class ProcessGroup {
 public:
  ProcessGroup() = default;  // an empty handle; valid() is false

  bool valid() const { return impl_ != nullptr; }
  int rank() const;  // rank within this group
  int size() const;
  const std::vector<int>& global_ranks() const;  // group rank -> world rank
  const std::string& name() const;
  Backend backend() const;
  std::chrono::milliseconds timeout() const;

  // In place over `t`.
  Work all_reduce(at::Tensor t, ReduceOp op = ReduceOp::Sum);
  // `out` holds size() equal pieces of `in`, concatenated along dim 0 in group-rank order.
  Work all_gather(at::Tensor out, const at::Tensor& in);
  // Uneven: rank r contributes dim0_sizes[r] rows (its `in` has that many). `out` has their sum.
  Work all_gather_uneven(at::Tensor out, const at::Tensor& in,
                         const std::vector<int64_t>& dim0_sizes);
  // `in` has size() equal pieces along dim 0; rank r receives the reduction of piece r in `out`.
  Work reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp op = ReduceOp::Sum);
  // Rows in_splits[r] of `in` go to rank r; rows out_splits[r] of `out` come from rank r.
  // Empty splits mean equal splits along dim 0.
  Work all_to_all(at::Tensor out, const at::Tensor& in, const std::vector<int64_t>& out_splits = {},
                  const std::vector<int64_t>& in_splits = {});
  // `root` is a group rank.
  Work broadcast(at::Tensor t, int root);
  // `peer` is a group rank.
  Work send(const at::Tensor& t, int peer, int tag = 0);
  Work recv(at::Tensor t, int peer, int tag = 0);
  Work barrier();

  struct Impl;
  explicit ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Impl& impl() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// Collectives this process has issued on any group since it started (barriers not counted),
// for tests and benchmarks: how many a training step makes is the figure to compare between
// implementations. all_gather_uneven counts as one all_gather.
struct CollectiveStats {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0, all_to_all = 0, broadcast = 0,
          send_recv = 0;
  int64_t total() const {
    return all_reduce + all_gather + reduce_scatter + all_to_all + broadcast + send_recv;
  }
};
CollectiveStats collective_stats();

}  // namespace vescale::dist
