// Internal: after a collective timed out, who never reached it. Gloo and NCCL only say that the
// wait expired; the message must name the rank to look at.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace vescale::dist {

// Every member that timed out in the group's collective number `seq` checks in on the group's
// store, then waits up to `wait` for the others. Returns what to tell the user: "rank 3 did not
// answer", "ranks 1, 3 did not answer", or, when the store itself does not answer (the process
// serving it is hung or dead), that. Never blocks longer than `wait` plus two seconds.
std::string missing_members(const c10::intrusive_ptr<c10d::Store>& store, int group_rank,
                            const std::vector<int>& global_ranks, int64_t seq,
                            std::chrono::milliseconds wait);

}  // namespace vescale::dist
