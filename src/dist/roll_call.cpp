#include "dist/roll_call.h"

#include <future>
#include <memory>
#include <thread>

namespace vescale::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string list_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// The members (global ranks) whose key under `prefix` is missing once `wait` has passed.
std::vector<int> call_roll(c10d::Store& store, int group_rank, const std::vector<int>& global_ranks,
                           const std::string& prefix, std::chrono::milliseconds wait) {
  store.set(prefix + std::to_string(group_rank), std::vector<uint8_t>{1});
  const auto deadline = Clock::now() + wait;
  std::vector<int> missing;
  for (;;) {
    missing.clear();
    for (size_t r = 0; r < global_ranks.size(); ++r)
      if (!store.check({prefix + std::to_string(r)})) missing.push_back(global_ranks[r]);
    if (missing.empty() || Clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string missing_members(const c10::intrusive_ptr<c10d::Store>& store, int group_rank,
                            const std::vector<int>& global_ranks, int64_t seq,
                            std::chrono::milliseconds wait) {
  const std::string prefix = "vescale_roll_call/" + std::to_string(seq) + "/";
  // On a thread of its own: a store whose server is stopped (SIGSTOP) accepts and never answers.
  auto answer = std::make_shared<std::promise<std::vector<int>>>();
  auto future = answer->get_future();
  std::thread([store, group_rank, global_ranks, prefix, wait, answer] {
    try {
      answer->set_value(call_roll(*store, group_rank, global_ranks, prefix, wait));
    } catch (...) {
      answer->set_exception(std::current_exception());
    }
  }).detach();
  const auto no_store =
      "the rendezvous store did not answer either: the process serving it (rank 0, or "
      "torchrun's agent) is hung or dead";
  if (future.wait_for(wait + std::chrono::seconds(2)) != std::future_status::ready) return no_store;
  try {
    const auto missing = future.get();
    if (missing.empty())
      return "every member reached it (one of them may be calling it with other shapes)";
    return list_ranks(missing) + " did not answer (hung, dead, or waiting in another collective)";
  } catch (const std::exception&) {
    return no_store;
  }
}

}  // namespace vescale::dist
