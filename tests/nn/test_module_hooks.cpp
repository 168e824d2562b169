// vescale::nn::call runs a module's forward hooks: the k-th tensor argument through the k-th input
// hook, the result through the output hook, and nothing once the hooks are removed.
#include <catch2/catch.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "vescale/nn/module_hooks.h"

namespace {
struct TwoInputImpl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& a, double scale, const torch::Tensor& b) {
    return a * scale - b;
  }
};
TORCH_MODULE(TwoInput);
}  // namespace

TEST_CASE("module hooks rewrite inputs in order and the output", "[models]") {
  TwoInput m;
  auto a = torch::full({2}, 3.0), b = torch::full({2}, 1.0);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 5.0)));  // no hooks: 3*2-1

  vescale::nn::ForwardHooks h;
  h.inputs = {[](const torch::Tensor& t) { return t + 10; },
              [](const torch::Tensor& t) { return t * 4; }};
  h.output = [](const torch::Tensor& t) { return -t; };
  vescale::nn::set_forward_hooks(m.get(), h);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, -(13.0 * 2 - 4.0))));

  // Another module of the same type is untouched.
  TwoInput other;
  CHECK(vescale::nn::call(other, a, 2.0, b).equal(torch::full({2}, 5.0)));

  // Only the second input hooked.
  h.inputs = {{}, [](const torch::Tensor& t) { return t * 4; }};
  h.output = {};
  vescale::nn::set_forward_hooks(m.get(), h);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 2.0)));

  vescale::nn::set_forward_hooks(m.get(), {});
  CHECK(vescale::nn::forward_hooks(m.get()) == nullptr);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 5.0)));
  vescale::nn::clear_all_forward_hooks();
}

TEST_CASE("an around hook gets the tensor inputs and a forward that outlives the call",
          "[models]") {
  TwoInput m;
  auto a = torch::full({2}, 3.0), b = torch::full({2}, 1.0);
  vescale::nn::ForwardHooks::Forward saved;
  vescale::nn::ForwardHooks h;
  h.inputs = {[](const torch::Tensor& t) { return t + 1; }};
  h.around = [&](const std::vector<torch::Tensor>& xs,
                 const vescale::nn::ForwardHooks::Forward& fwd) {
    REQUIRE(xs.size() == 2);
    CHECK(xs[0].equal(torch::full({2}, 4.0)));  // the input hook ran first
    saved = fwd;
    return fwd(xs) * 10;
  };
  vescale::nn::set_forward_hooks(m.get(), h);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 70.0)));  // (4*2-1)*10
  vescale::nn::clear_all_forward_hooks();
  // Rerun later from new tensors, the scale argument kept.
  CHECK(saved({torch::full({2}, 5.0), torch::full({2}, 2.0)}).equal(torch::full({2}, 8.0)));
}

TEST_CASE("hooks of a freed module do not reach a new module at the same address", "[models]") {
  const torch::nn::Module* old_addr = nullptr;
  {
    TwoInput m;
    old_addr = m.get();
    vescale::nn::ForwardHooks h;
    h.output = [](const torch::Tensor& t) { return t * 0; };
    vescale::nn::set_forward_hooks(m.get(), h);
    CHECK(vescale::nn::forward_hooks(m.get()) != nullptr);
  }
  // Whether or not the allocator reuses the address, the stale entry must not apply.
  CHECK(vescale::nn::forward_hooks(old_addr) == nullptr);
  TwoInput fresh;
  auto a = torch::full({2}, 3.0), b = torch::full({2}, 1.0);
  CHECK(vescale::nn::call(fresh, a, 2.0, b).equal(torch::full({2}, 5.0)));
  vescale::nn::clear_all_forward_hooks();
}
