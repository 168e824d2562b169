#include "vescale/nn/module_hooks.h"

#include <torch/nn/module.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace vescale::nn {
namespace {

constexpr size_t kSlots = static_cast<size_t>(HookSlot::Context) + 1;

// A module's chain. It remembers its module weakly: a module freed with links still in place
// must not pass them on to a new module that happens to get the same address.
struct Entry {
  std::weak_ptr<const torch::nn::Module> owner;
  std::array<std::optional<ForwardHooks>, kSlots> links;
  std::array<uint64_t, kSlots> ids{};
  ForwardHooks composed;  // the links nested in slot order, what call() runs
};
std::unordered_map<const torch::nn::Module*, Entry>& table() {
  static std::unordered_map<const torch::nn::Module*, Entry> t;
  return t;
}
std::atomic<bool> any_hooks{false};
uint64_t next_id = 1;

using Fn = std::function<at::Tensor(const at::Tensor&)>;
Fn then(Fn first, Fn second) {
  if (!first) return second;
  if (!second) return first;
  return [first = std::move(first), second = std::move(second)](const at::Tensor& t) {
    return second(first(t));
  };
}

// Outer links first: their inputs apply first, their around wraps the inner ones', their
// output applies last.
ForwardHooks compose(const Entry& e) {
  ForwardHooks out;
  for (size_t s = kSlots; s-- > 0;) {  // inner to outer
    if (!e.links[s]) continue;
    const ForwardHooks& link = *e.links[s];
    if (out.inputs.size() < link.inputs.size()) out.inputs.resize(link.inputs.size());
    for (size_t k = 0; k < link.inputs.size(); ++k)
      out.inputs[k] = then(link.inputs[k], out.inputs[k]);
    out.output = then(out.output, link.output);
    if (link.around) {
      if (!out.around) {
        out.around = link.around;
      } else {
        // The inner chain by value: an outer link may keep the forward it was given (activation
        // checkpointing reruns it in backward) past a later change of the chain.
        out.around = [outer = link.around, inner = out.around](const std::vector<at::Tensor>& xs,
                                                               const ForwardHooks::Forward& f) {
          return outer(xs, [inner, f](const std::vector<at::Tensor>& ys) { return inner(ys, f); });
        };
      }
    }
  }
  return out;
}

void refresh_any() { any_hooks.store(!table().empty(), std::memory_order_release); }

// Drops the link in `slot` (only the one numbered `id`, unless id is 0) and the entry once empty.
void remove(const torch::nn::Module* module, HookSlot slot, uint64_t id) {
  auto it = table().find(module);
  if (it == table().end()) return;
  Entry& e = it->second;
  const auto s = static_cast<size_t>(slot);
  if (!e.links[s] || (id != 0 && e.ids[s] != id)) return;
  e.links[s].reset();
  e.ids[s] = 0;
  bool empty = true;
  for (const auto& l : e.links) empty = empty && !l;
  if (empty)
    table().erase(it);
  else
    e.composed = compose(e);
  refresh_any();
}

}  // namespace

const char* to_string(HookSlot slot) {
  switch (slot) {
    case HookSlot::Plan:
      return "plan";
    case HookSlot::ZeroGather:
      return "ZeRO-3 gather";
    case HookSlot::Timeline:
      return "timeline";
    case HookSlot::Checkpoint:
      return "activation checkpointing";
    case HookSlot::Experts:
      return "experts boundary";
    case HookSlot::Context:
      return "context-parallel attention";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, HookSlot slot) { return os << to_string(slot); }

HookHandle::HookHandle(HookHandle&& other) noexcept
    : module_(other.module_), slot_(other.slot_), id_(other.id_) {
  other.module_ = nullptr;
}

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    reset();
    module_ = other.module_, slot_ = other.slot_, id_ = other.id_;
    other.module_ = nullptr;
  }
  return *this;
}

void HookHandle::detach() { module_ = nullptr; }

void HookHandle::reset() {
  if (module_ == nullptr) return;
  remove(module_, slot_, id_);
  module_ = nullptr;
}

HookHandle add_forward_hook(const torch::nn::Module& module, HookSlot slot, ForwardHooks link) {
  auto& entry = table()[&module];
  if (entry.owner.expired()) entry = Entry{module.shared_from_this(), {}, {}, {}};  // new or stale
  const auto s = static_cast<size_t>(slot);
  if (entry.links[s])
    throw std::logic_error(std::string("forward hooks: the module already has a ") +
                           to_string(slot) + " link; remove it (its handle) before adding another");
  entry.links[s] = std::move(link);
  entry.ids[s] = next_id++;
  entry.composed = compose(entry);
  refresh_any();
  return HookHandle(&module, slot, entry.ids[s]);
}

void remove_forward_hook(const torch::nn::Module& module, HookSlot slot) {
  remove(&module, slot, 0);
}

const ForwardHooks* forward_hooks(const torch::nn::Module* module) {
  if (!any_hooks.load(std::memory_order_relaxed)) return nullptr;
  auto it = table().find(module);
  if (it == table().end()) return nullptr;
  if (it->second.owner.expired()) return nullptr;  // a stale entry of a freed module
  return &it->second.composed;
}

std::vector<HookSlot> hook_slots(const torch::nn::Module& module) {
  std::vector<HookSlot> out;
  auto it = table().find(&module);
  if (it == table().end() || it->second.owner.expired()) return out;
  for (size_t s = 0; s < kSlots; ++s)
    if (it->second.links[s]) out.push_back(static_cast<HookSlot>(s));
  return out;
}

namespace {
thread_local bool t_recomputing = false;
}

bool recomputing() { return t_recomputing; }
RecomputeScope::RecomputeScope() : previous_(t_recomputing) { t_recomputing = true; }
RecomputeScope::~RecomputeScope() { t_recomputing = previous_; }

}  // namespace vescale::nn
