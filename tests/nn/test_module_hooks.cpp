// vescale::nn::call runs a module's forward hooks: the k-th tensor argument through the k-th input
// hook, the result through the output hook, and nothing once the hooks are removed; several
// users' links nest in their slots' order whatever order they were added in.
#include <catch2/catch.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

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

  using vescale::nn::HookSlot;
  vescale::nn::ForwardHooks h;
  h.inputs = {[](const torch::Tensor& t) { return t + 10; },
              [](const torch::Tensor& t) { return t * 4; }};
  h.output = [](const torch::Tensor& t) { return -t; };
  {
    auto link = vescale::nn::add_forward_hook(*m, HookSlot::Plan, h);
    CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, -(13.0 * 2 - 4.0))));

    // Another module of the same type is untouched.
    TwoInput other;
    CHECK(vescale::nn::call(other, a, 2.0, b).equal(torch::full({2}, 5.0)));
    // One link per slot.
    CHECK_THROWS_WITH(vescale::nn::add_forward_hook(*m, HookSlot::Plan, h),
                      Catch::Matchers::Contains("already has a plan link"));
  }
  // The handle went: so did the link.
  CHECK(vescale::nn::forward_hooks(m.get()) == nullptr);

  // Only the second input hooked.
  h.inputs = {{}, [](const torch::Tensor& t) { return t * 4; }};
  h.output = {};
  auto link = vescale::nn::add_forward_hook(*m, HookSlot::Plan, h);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 2.0)));
  link.reset();
  CHECK(vescale::nn::forward_hooks(m.get()) == nullptr);
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 5.0)));
}

TEST_CASE("links nest in slot order whatever order they were added in, and leave one by one",
          "[models]") {
  using vescale::nn::ForwardHooks;
  using vescale::nn::HookSlot;
  TwoInput m;
  auto a = torch::full({2}, 3.0), b = torch::full({2}, 1.0);
  std::vector<std::string> trace;
  auto around = [&trace](const std::string& name) {
    ForwardHooks h;
    h.around = [&trace, name](const std::vector<torch::Tensor>& xs, const ForwardHooks::Forward& f) {
      trace.push_back(name + " in");
      auto out = f(xs);
      trace.push_back(name + " out");
      return out;
    };
    return h;
  };
  // Added inner first: the chain still nests timeline outside checkpoint outside experts.
  auto experts = vescale::nn::add_forward_hook(*m, HookSlot::Experts, around("experts"));
  auto ckpt = vescale::nn::add_forward_hook(*m, HookSlot::Checkpoint, around("checkpoint"));
  ForwardHooks plan;
  plan.inputs = {[&trace](const torch::Tensor& t) { trace.push_back("plan input"); return t + 1; }};
  plan.output = [&trace](const torch::Tensor& t) { trace.push_back("plan output"); return t * 10; };
  auto boundary = vescale::nn::add_forward_hook(*m, HookSlot::Plan, plan);
  auto spans = vescale::nn::add_forward_hook(*m, HookSlot::Timeline, around("timeline"));
  CHECK(vescale::nn::hook_slots(*m) == std::vector<HookSlot>{HookSlot::Plan, HookSlot::Timeline,
                                                             HookSlot::Checkpoint, HookSlot::Experts});
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 70.0)));  // ((3+1)*2-1)*10
  CHECK(trace == std::vector<std::string>{"plan input", "timeline in", "checkpoint in", "experts in",
                                          "experts out", "checkpoint out", "timeline out",
                                          "plan output"});
  // Removing one link leaves the others, in order.
  ckpt.reset();
  trace.clear();
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 70.0)));
  CHECK(trace == std::vector<std::string>{"plan input", "timeline in", "experts in", "experts out",
                                          "timeline out", "plan output"});
  // A module's links by slot, whoever holds the handle (plan::remove_forward_hooks does this);
  // the stale handle then removes nothing.
  vescale::nn::remove_forward_hook(*m, HookSlot::Plan);
  boundary.reset();
  CHECK(vescale::nn::hook_slots(*m) == std::vector<HookSlot>{HookSlot::Timeline, HookSlot::Experts});
  CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 5.0)));
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
  {
    auto link = vescale::nn::add_forward_hook(*m, vescale::nn::HookSlot::Checkpoint, h);
    CHECK(vescale::nn::call(m, a, 2.0, b).equal(torch::full({2}, 70.0)));  // (4*2-1)*10
  }
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
    vescale::nn::add_forward_hook(*m, vescale::nn::HookSlot::Plan, h).detach();
    CHECK(vescale::nn::forward_hooks(m.get()) != nullptr);
  }
  // Whether or not the allocator reuses the address, the stale entry must not apply.
  CHECK(vescale::nn::forward_hooks(old_addr) == nullptr);
  TwoInput fresh;
  auto a = torch::full({2}, 3.0), b = torch::full({2}, 1.0);
  CHECK(vescale::nn::call(fresh, a, 2.0, b).equal(torch::full({2}, 5.0)));
  // The stale entry gives way to the new module's own links.
  {
    vescale::nn::ForwardHooks h;
    h.output = [](const torch::Tensor& t) { return t + 1; };
    auto link = vescale::nn::add_forward_hook(*fresh, vescale::nn::HookSlot::Plan, h);
    CHECK(vescale::nn::call(fresh, a, 2.0, b).equal(torch::full({2}, 6.0)));
  }
}
