#include "vescale/nn/module_hooks.h"

#include <torch/nn/module.h>

#include <atomic>
#include <memory>
#include <unordered_map>

namespace vescale::nn {
namespace {
// Each entry remembers its module weakly: a module freed with hooks still installed must not
// pass them on to a new module that happens to get the same address.
struct Entry {
  std::weak_ptr<const torch::nn::Module> owner;
  ForwardHooks hooks;
};
std::unordered_map<const torch::nn::Module*, Entry>& table() {
  static std::unordered_map<const torch::nn::Module*, Entry> t;
  return t;
}
std::atomic<bool> any_hooks{false};
}  // namespace

void set_forward_hooks(const torch::nn::Module* module, ForwardHooks hooks) {
  bool empty = !hooks.output && !hooks.around;
  for (auto& f : hooks.inputs) empty = empty && !f;
  if (empty) {
    table().erase(module);
  } else {
    table()[module] = Entry{module->shared_from_this(), std::move(hooks)};
  }
  any_hooks.store(!table().empty(), std::memory_order_release);
}

void clear_all_forward_hooks() {
  table().clear();
  any_hooks.store(false, std::memory_order_release);
}

const ForwardHooks* forward_hooks(const torch::nn::Module* module) {
  if (!any_hooks.load(std::memory_order_relaxed)) return nullptr;
  auto it = table().find(module);
  if (it == table().end()) return nullptr;
  if (it->second.owner.expired()) return nullptr;  // a stale entry of a freed module
  return &it->second.hooks;
}

namespace {
thread_local bool t_recomputing = false;
}

bool recomputing() { return t_recomputing; }
RecomputeScope::RecomputeScope() : previous_(t_recomputing) { t_recomputing = true; }
RecomputeScope::~RecomputeScope() { t_recomputing = previous_; }

}  // namespace vescale::nn
