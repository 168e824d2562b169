// Forward hooks for plain libtorch modules. PyTorch's nn.Module has register_forward_pre_hook
// and register_forward_hook; libtorch's C++ modules have neither. Models call their submodules
// through vescale::nn::call(sub, args...), which runs the hooks some framework installed on `sub`
// (vescale's parallelize reshards inputs and outputs this way) and is a plain call otherwise.
// Several users hook one module (the plan's boundary, ZeRO-3, the timeline, activation
// checkpointing, the experts' boundary): each adds a link to the module's chain in its slot and
// keeps a handle; the chain's order is fixed (HookSlot). Nothing here knows about parallelism.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace vescale::nn {

// One link of a module's hook chain: what one user adds around the module's forward.
struct ForwardHooks {
  // inputs[k] rewrites the k-th tensor argument (an empty function leaves it alone).
  std::vector<std::function<at::Tensor(const at::Tensor&)>> inputs;
  // Rewrites the result when forward returns one tensor.
  std::function<at::Tensor(const at::Tensor&)> output;
  // Runs in place of forward when forward returns one tensor: gets the (hooked) tensor
  // arguments and the forward itself as a function of them, e.g. for activation
  // checkpointing, which reruns forward from saved inputs during backward.
  using Forward = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
  std::function<at::Tensor(const std::vector<at::Tensor>&, const Forward&)> around;
};

// The users of a module's chain, outermost first. Each module has at most one link per slot,
// and the chain nests them in this order whatever order they were added in:
//   inputs  of every link, outer links first, before any around;
//   around  outer links wrap inner ones, which wrap the forward;
//   output  inner links first, after every around.
enum class HookSlot : int {
  Plan,        // plan::parallelize: the forward entries' resharding; dropout on one device
  ZeroGather,  // ZeRO-3: a unit's parameters gathered around its forward, released after
  Timeline,    // the timeline window: a block's forward and backward spans
  Checkpoint,  // activation checkpointing: the block rerun in backward
  Experts,     // the mixture-of-experts boundary: dispatch, the local experts, combine
  Context,     // context parallelism: attention over a sequence split over ranks
};
const char* to_string(HookSlot slot);
std::ostream& operator<<(std::ostream& os, HookSlot slot);

// Owns one link: removing it (destruction, reset()) leaves the module's other links as they
// are. Move-only.
class HookHandle {
 public:
  HookHandle() = default;
  ~HookHandle() { reset(); }
  HookHandle(HookHandle&& other) noexcept;
  HookHandle& operator=(HookHandle&& other) noexcept;
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  void reset();
  // Leaves the link to the module for its lifetime (remove_forward_hook removes it).
  void detach();
  bool active() const { return module_ != nullptr; }

 private:
  friend HookHandle add_forward_hook(const torch::nn::Module&, HookSlot, ForwardHooks);
  HookHandle(const torch::nn::Module* module, HookSlot slot, uint64_t id)
      : module_(module), slot_(slot), id_(id) {}
  const torch::nn::Module* module_ = nullptr;
  HookSlot slot_ = HookSlot::Plan;
  uint64_t id_ = 0;
};

// Process-wide table (every module of the process, each model's modules their own entries):
// adds `link` to `module`'s chain in `slot`; throws when the slot is taken. Add and remove links
// before running forward (the table is read without locks).
[[nodiscard]] HookHandle add_forward_hook(const torch::nn::Module& module, HookSlot slot,
                                          ForwardHooks link);
// Removes the module's link in `slot`, whoever added it (no-op when there is none): for owners
// that track modules rather than handles (plan::remove_forward_hooks).
void remove_forward_hook(const torch::nn::Module& module, HookSlot slot);
// The module's chain composed into one ForwardHooks, or nullptr; one relaxed load when no
// module of the process has hooks.
const ForwardHooks* forward_hooks(const torch::nn::Module* module);
// The slots of the module's chain that hold a link, outermost first (for tests and messages).
std::vector<HookSlot> hook_slots(const torch::nn::Module& module);

// True on this thread while a forward runs again for activation checkpointing (during
// backward). Code that counts what a forward did (a mixture of experts' loads) skips the rerun.
bool recomputing();
class RecomputeScope {  // RAII: marks this thread as recomputing
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

namespace detail {
// Arguments are held by value (tensors share storage), so the forward handed to an `around`
// hook stays valid after call() returns: checkpointing reruns it during backward.
template <class T>
std::decay_t<T> hook_input(const ForwardHooks& h, size_t& k, T&& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    const size_t i = k++;
    return (i < h.inputs.size() && h.inputs[i]) ? h.inputs[i](arg) : at::Tensor(arg);
  } else {
    return std::forward<T>(arg);
  }
}

template <class T>
const T& pick_input(const std::vector<at::Tensor>& tensors, size_t& k, const T& arg) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return tensors.at(k++);
  } else {
    return arg;
  }
}

template <class T>
void collect_tensor(std::vector<at::Tensor>& out, const T& arg) {
  if constexpr (std::is_same_v<T, at::Tensor>) out.push_back(arg);
}
}  // namespace detail

// sub(args...) with sub's hooks around it. `sub` is a module holder (torch::nn::Linear, ...)
// or a shared_ptr to a module.
template <class Holder, class... Args>
auto call(Holder&& sub, Args&&... args) {
  const ForwardHooks* h = forward_hooks(sub.get());
  if (h == nullptr) return sub->forward(std::forward<Args>(args)...);
  size_t k = 0;
  // Braced initialisation runs left to right, so the k-th tensor gets the k-th input hook.
  std::tuple<std::decay_t<Args>...> hooked{detail::hook_input(*h, k, std::forward<Args>(args))...};
  auto run = [](auto& module, auto& tuple) {
    return std::apply([&](auto&... a) { return module->forward(a...); }, tuple);
  };
  using Out = decltype(sub->forward(std::forward<Args>(args)...));
  if constexpr (std::is_same_v<Out, at::Tensor>) {
    at::Tensor out;
    if (h->around) {
      std::vector<at::Tensor> inputs;
      std::apply([&](const auto&... a) { (detail::collect_tensor(inputs, a), ...); }, hooked);
      // forward again from other tensors in the same positions, the other arguments as given
      ForwardHooks::Forward forward = [module = std::decay_t<Holder>(sub), hooked,
                                       run](const std::vector<at::Tensor>& xs) mutable {
        size_t j = 0;
        auto picked = std::apply(
            [&](const auto&... a) {
              return std::tuple<std::decay_t<Args>...>{detail::pick_input(xs, j, a)...};
            },
            hooked);
        return run(module, picked);
      };
      out = h->around(inputs, forward);
    } else {
      out = run(sub, hooked);
    }
    return h->output ? h->output(out) : out;
  } else {
    return run(sub, hooked);
  }
}

}  // namespace vescale::nn
