// Forward hooks for plain libtorch modules. PyTorch's nn.Module has register_forward_pre_hook
// and register_forward_hook; libtorch's C++ modules have neither. Models call their submodules
// through vescale::nn::call(sub, args...), which runs the hooks some framework installed on `sub`
// (vescale's parallelize reshards inputs and outputs this way) and is a plain call otherwise.
// Nothing here knows about parallelism.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}

namespace vescale::nn {

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

// Process-wide: one table for every module of the process (parallelize fills it;
// plan::remove_forward_hooks empties one model's part). Install hooks before running forward
// (the table is read without locks). Installing an empty ForwardHooks removes a module's hooks;
// clear_all_forward_hooks() empties the whole table, every model's.
void set_forward_hooks(const torch::nn::Module* module, ForwardHooks hooks);
void clear_all_forward_hooks();
// The module's hooks, or nullptr; one relaxed load when none are installed anywhere.
const ForwardHooks* forward_hooks(const torch::nn::Module* module);

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
