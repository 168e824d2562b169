// Forward hooks for plain libtorch modules. PyTorch's nn.Module has register_forward_pre_hook
// and register_forward_hook; libtorch's C++ modules have neither. Models call their submodules
// through models::call(sub, args...), which runs the hooks some framework installed on `sub`
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

namespace models {

struct ForwardHooks {
  // inputs[k] rewrites the k-th tensor argument (an empty function leaves it alone).
  std::vector<std::function<at::Tensor(const at::Tensor&)>> inputs;
  // Rewrites the result when forward returns one tensor.
  std::function<at::Tensor(const at::Tensor&)> output;
};

// Install hooks before running forward (the table is read without locks). Installing an
// empty ForwardHooks removes a module's hooks.
void set_forward_hooks(const torch::nn::Module* module, ForwardHooks hooks);
void clear_all_forward_hooks();
// The module's hooks, or nullptr; one relaxed load when none are installed anywhere.
const ForwardHooks* forward_hooks(const torch::nn::Module* module);

namespace detail {
template <class T>
decltype(auto) hook_input(const ForwardHooks& h, size_t& k, T&& arg) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    const size_t i = k++;
    return (i < h.inputs.size() && h.inputs[i]) ? h.inputs[i](arg) : at::Tensor(arg);
  } else {
    return std::forward<T>(arg);
  }
}
}  // namespace detail

// sub(args...) with sub's hooks around it. `sub` is a module holder (torch::nn::Linear, ...).
template <class Holder, class... Args>
auto call(Holder&& sub, Args&&... args) {
  const ForwardHooks* h = forward_hooks(sub.get());
  if (h == nullptr) return sub->forward(std::forward<Args>(args)...);
  size_t k = 0;
  // Braced initialisation runs left to right, so the k-th tensor gets the k-th input hook.
  std::tuple<decltype(detail::hook_input(*h, k, std::forward<Args>(args)))...> hooked{
      detail::hook_input(*h, k, std::forward<Args>(args))...};
  auto out = std::apply([&](auto&&... a) { return sub->forward(std::forward<decltype(a)>(a)...); }, std::move(hooked));
  if constexpr (std::is_same_v<decltype(out), at::Tensor>) {
    if (h->output) return h->output(out);
  }
  return out;
}

}  // namespace models
