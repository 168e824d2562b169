// Internal: what a ProcessGroup handle holds, and how groups are built over a store.
#pragma once
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "vescale/dist/process_group.h"

namespace vescale::dist {

struct ProcessGroup::Impl : std::enable_shared_from_this<ProcessGroup::Impl> {
  c10::intrusive_ptr<c10d::Backend> backend;
  c10::intrusive_ptr<c10d::Store> store;  // the group's own (prefixed): for the roll call
  int rank = 0;
  int size = 1;
  std::vector<int> global_ranks;
  std::string name;
  Backend kind = Backend::Gloo;
  bool cuda = false;  // the world's tensors are CUDA tensors (always with NCCL)
  std::chrono::milliseconds timeout{0};
  // The timeline's view (docs/timeline.md): every collective on the group gets the next number,
  // the same on every member, timeline on or off; transfers are numbered per (direction, peer,
  // tag), which pairs each send with its receive.
  uint32_t trace_name = 0;  // the name, interned
  std::atomic<int64_t> seq{0};
  std::mutex p2p_mu;
  std::map<std::tuple<int, int, int>, int64_t> p2p_seq;
};

struct GroupSpec {
  std::string name;               // for messages: "world", "mesh0/dp,tp/1", ...
  std::vector<int> global_ranks;  // sorted members
  int rank = 0;                   // this process's index in global_ranks
  Backend kind = Backend::Gloo;
  bool cuda = false;  // collectives take CUDA tensors (Gloo stages them where it must)
  std::chrono::milliseconds timeout{0};
};

// Constructs the backend; blocks until every member has connected (bounded by the timeout).
ProcessGroup make_process_group(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec,
                                const std::string& gloo_host);

}  // namespace vescale::dist
