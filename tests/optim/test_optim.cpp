// AdamW against torch::optim::AdamW, the LR schedule against hand-computed values, and
// clip_grad_norm_ against torch::nn::utils::clip_grad_norm_.
#include <catch2/catch.hpp>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <numbers>

#include "vescale/common/check.h"
#include "vescale/optim/adamw.h"
#include "vescale/optim/clip_grad.h"
#include "vescale/optim/lr_schedule.h"

using namespace vescale::optim;
using Catch::Matchers::Contains;

namespace {
// A fixed problem: a small regression whose gradient changes every step.
at::Tensor loss_of(const std::vector<at::Tensor>& p, int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  auto x = at::randn({8, 5}, gen);
  auto y = at::randn({8, 3}, gen);
  auto out = at::linear(x, p[0], p[1]);
  return (out - y).pow(2).mean() + p[2].pow(2).sum() * 0.1;
}

std::vector<at::Tensor> make_params() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::vector<at::Tensor> p{at::randn({3, 5}, gen), at::randn({3}, gen), at::randn({4}, gen),
                            at::randn({2, 2}, gen)};
  for (auto& t : p) t.set_requires_grad(true);
  return p;
}
}  // namespace

TEST_CASE("AdamW matches torch::optim::AdamW step for step", "[optim]") {
  // fused=false: the op-by-op loop (what DTensor parameters take), bitwise torch's arithmetic;
  // fused=true: at::_fused_adamw_, the same update rounded in another order (1 ulp).
  const bool fused = GENERATE(false, true);
  const double lr = 0.05, wd = 0.1;
  auto ours = make_params(), ref = make_params();
  // Two groups with different decay, as the trainer uses them; p[3] never gets a gradient.
  AdamW opt({ParamGroup{{{"w", ours[0]}, {"frozen", ours[3]}}, wd},
             ParamGroup{{{"b", ours[1]}, {"c", ours[2]}}, 0.0}},
            AdamWOptions{.lr = lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .fused = fused});
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(
      std::vector<at::Tensor>{ref[0], ref[3]},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd)));
  groups.emplace_back(
      std::vector<at::Tensor>{ref[1], ref[2]},
      std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW torch_opt(std::move(groups), torch::optim::AdamWOptions(lr));
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    torch_opt.zero_grad();
    loss_of(ours, step).backward();
    loss_of(ref, step).backward();
    opt.step();
    torch_opt.step();
    for (int i = 0; i < 4; ++i) {
      INFO("step " << step << " param " << i);
      INFO("fused " << fused << ", max abs diff " << (ours[i] - ref[i]).abs().max().item<double>());
      if (fused) {
        CHECK(at::allclose(ours[i], ref[i], 1.2e-7, 1e-7));  // 1 ulp of |p| in [1, 2)
      } else {
        CHECK(at::equal(ours[i], ref[i]));
      }
    }
  }
  // The parameter without a gradient moved neither way (torch skips its decay too).
  CHECK(at::equal(ours[3], make_params()[3]));
  CHECK(opt.state_tensors().count("frozen.step") == 0);
  CHECK(opt.state_tensors().at("w.step").item<int64_t>() == 6);
}

TEST_CASE("AdamW state round-trips through state_tensors", "[optim]") {
  auto a = make_params(), b = make_params();
  AdamW opt_a(decay_groups({{"w", a[0]}, {"b", a[1]}, {"c", a[2]}}, 0.1), {.lr = 0.01});
  AdamW opt_b(decay_groups({{"w", b[0]}, {"b", b[1]}, {"c", b[2]}}, 0.1), {.lr = 0.01});
  for (int step = 0; step < 3; ++step) {
    opt_a.zero_grad();
    loss_of(a, step).backward();
    opt_a.step();
  }
  {
    c10::NoGradGuard g;
    for (int i = 0; i < 3; ++i) b[i].copy_(a[i]);
  }
  opt_b.load_state_tensors(opt_a.state_tensors());
  for (int step = 3; step < 5; ++step) {
    opt_a.zero_grad();
    opt_b.zero_grad();
    loss_of(a, step).backward();
    loss_of(b, step).backward();
    opt_a.step();
    opt_b.step();
  }
  for (int i = 0; i < 3; ++i) CHECK(at::equal(a[i], b[i]));

  auto bad = opt_a.state_tensors();
  bad["w.exp_avg"] = at::zeros({2});
  CHECK_THROWS_WITH(opt_b.load_state_tensors(bad),
                    Contains("AdamW state: 'w' has shape [2] in the checkpoint"));
  auto extra = opt_a.state_tensors();
  extra["z.step"] = at::scalar_tensor(1, at::kLong);
  CHECK_THROWS_WITH(opt_b.load_state_tensors(extra),
                    Contains("1 entries for parameters this optimizer doesn't have"));
}

TEST_CASE("decay groups: 2-D+ tensors decay, biases and norms don't", "[optim]") {
  auto groups = decay_groups({{"wte.weight", at::zeros({10, 4})},
                              {"ln.weight", at::zeros({4})},
                              {"fc.weight", at::zeros({4, 4})},
                              {"fc.bias", at::zeros({4})}},
                             0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].first == "wte.weight");
  CHECK(groups[0].params[1].first == "fc.weight");
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(groups[1].params[0].first == "ln.weight");
  CHECK(groups[1].params[1].first == "fc.bias");
}

TEST_CASE("warmup + cosine schedule at chosen steps", "[optim]") {
  LRSchedule s{
      .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10, .total_steps = 110, .decay = Decay::Cosine};
  CHECK(lr_at(s, 0) == Approx(1e-4).epsilon(1e-12));     // 1e-3 * 1/10
  CHECK(lr_at(s, 4) == Approx(5e-4).epsilon(1e-12));     // 1e-3 * 5/10
  CHECK(lr_at(s, 9) == Approx(1e-3).epsilon(1e-12));     // warmup ends at the peak
  CHECK(lr_at(s, 10) == Approx(1e-3).epsilon(1e-12));    // decay starts at the peak
  CHECK(lr_at(s, 60) == Approx(5.5e-4).epsilon(1e-12));  // half way: (lr + min_lr) / 2
  // a quarter of the way: min + (1 + cos(pi/4))/2 * (lr - min)
  CHECK(lr_at(s, 35) == Approx(1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4).epsilon(1e-12));
  CHECK(lr_at(s, 110) == Approx(1e-4).epsilon(1e-12));  // the floor
  CHECK(lr_at(s, 500) == Approx(1e-4).epsilon(1e-12));  // stays there
  s.decay = Decay::Linear;
  CHECK(lr_at(s, 35) == Approx(1e-3 - 0.25 * 9e-4).epsilon(1e-12));
  s.decay = Decay::Constant;
  CHECK(lr_at(s, 100) == 1e-3);
  s.warmup_steps = 0;
  s.decay = Decay::Cosine;
  CHECK(lr_at(s, 0) == Approx(1e-3).epsilon(1e-12));
  CHECK_THROWS_WITH(lr_at(s, -1), Contains("step must be >= 0"));
}

TEST_CASE("clip_grad_norm_ matches torch::nn::utils::clip_grad_norm_", "[optim]") {
  for (double max_norm : {0.5, 1e3}) {  // clipping, and a norm below the limit
    auto ours = make_params(), ref = make_params();
    loss_of(ours, 0).backward();
    loss_of(ref, 0).backward();
    // One param without a grad is skipped by both.
    const double torch_norm = torch::nn::utils::clip_grad_norm_(ref, max_norm);
    const double norm = clip_grad_norm_(ours, max_norm).item<double>();
    CHECK(norm == Approx(torch_norm).epsilon(1e-6));
    CHECK(norm > 0.5);  // the first case really clips
    for (int i = 0; i < 3; ++i) CHECK(at::allclose(ours[i].grad(), ref[i].grad(), 1e-6, 1e-7));
    if (max_norm < 1) {
      at::Tensor total = at::zeros({});
      for (int i = 0; i < 3; ++i) total += ours[i].grad().pow(2).sum();
      CHECK(total.sqrt().item<double>() == Approx(max_norm).epsilon(1e-5));
    }
  }
}
