#include "vescale/ddp/zero_optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <set>

#include "grad_reducer_state.h"
#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/optim/clip_grad.h"

namespace vescale::ddp {

struct ZeroOptimizer::Impl {
  GradReducer::State& rs;
  std::vector<optim::ParamGroup> groups;
  optim::AdamWOptions options;
  std::map<std::string, double> weight_decay;  // by parameter name
  bool built = false;
  int64_t step = 0;

  // Per bucket: this rank's slice of the parameters (fp32 master values) and its moments.
  struct Slice {
    at::Tensor param, exp_avg, exp_avg_sq;
  };
  std::vector<Slice> slices;
  std::vector<double> param_decay;                // per reducer param
  std::vector<std::vector<int64_t>> norm_dims;    // per reducer param: the group its norm term sums over
  std::unique_ptr<optim::AdamW> rest;             // parameters outside the buckets
  std::vector<at::Tensor> rest_params;

  explicit Impl(GradReducer::State& s) : rs(s) {}

  void build();
};

// The layout exists once the reducer's first finish() has run.
void ZeroOptimizer::Impl::build() {
  if (built) return;
  VESCALE_CHECK(rs.layout_built, "ZeroOptimizer: call GradReducer::finish() after backward, before clipping or stepping");
  c10::NoGradGuard no_grad;
  std::set<std::string> bucketed;
  for (const auto& p : rs.params)
    if (p.bucket >= 0) bucketed.insert(p.name);
  std::vector<optim::ParamGroup> rest_groups;
  for (const auto& g : groups) {
    optim::ParamGroup r{{}, g.weight_decay};
    for (const auto& [name, p] : g.params) {
      weight_decay[name] = g.weight_decay;
      if (bucketed.count(name) == 0) r.params.emplace_back(name, p), rest_params.push_back(p);
    }
    if (!r.params.empty()) rest_groups.push_back(std::move(r));
  }
  rest = std::make_unique<optim::AdamW>(std::move(rest_groups), options);

  param_decay.assign(rs.params.size(), 0.0);
  norm_dims.assign(rs.params.size(), {});
  for (auto& b : rs.buckets) {
    // The slice's sum of squares adds up over the shard group; a parameter sharded on other
    // mesh dims (tensor parallel) also adds up over those.
    std::vector<int64_t> shard_dims = rs.options.fused ? b.dims : std::vector<int64_t>{b.dims[0]};
    for (size_t i : b.params) {
      auto it = weight_decay.find(rs.params[i].name);
      VESCALE_CHECK(it != weight_decay.end(), "ZeroOptimizer: parameter '", rs.params[i].name,
                    "' is in a gradient bucket but in no optimizer group; pass every parameter");
      param_decay[i] = it->second;
      std::set<int64_t> dims(shard_dims.begin(), shard_dims.end());
      const auto& placements = dtensor::spec_of(rs.params[i].tensor).placements;
      for (size_t d = 0; d < placements.size(); ++d)
        if (placements[d].is_shard()) dims.insert(static_cast<int64_t>(d));
      norm_dims[i].assign(dims.begin(), dims.end());
    }
    Slice s;
    const at::Tensor first = dtensor::to_local(rs.params[b.params.front()].tensor.detach());
    s.param = at::zeros({b.chunk}, first.options().dtype(at::kFloat));
    for (const auto& seg : b.segments) {
      const at::Tensor local = dtensor::to_local(rs.params[seg.param].tensor.detach()).reshape({-1});
      s.param.narrow(0, seg.shard_offset, seg.numel).copy_(local.narrow(0, seg.param_offset, seg.numel));
    }
    s.exp_avg = at::zeros_like(s.param);
    s.exp_avg_sq = at::zeros_like(s.param);
    slices.push_back(std::move(s));
  }
  built = true;
}

ZeroOptimizer::ZeroOptimizer(GradReducer& reducer, std::vector<optim::ParamGroup> groups, optim::AdamWOptions options)
    : impl_(std::make_unique<Impl>(reducer.state())) {
  VESCALE_CHECK(impl_->rs.options.zero >= 1, "ZeroOptimizer: the GradReducer was built with zero=",
                impl_->rs.options.zero, "; build it with GradReducerOptions::zero >= 1 (parallel.zero in the config)");
  impl_->groups = std::move(groups);
  impl_->options = options;
}

ZeroOptimizer::~ZeroOptimizer() = default;

at::Tensor ZeroOptimizer::clip_grad_norm_(double max_norm) {
  Impl& z = *impl_;
  z.build();
  c10::NoGradGuard no_grad;
  GradReducer::State& rs = z.rs;
  // One partial sum per reduction group, created for every bucketed parameter whether or not
  // this rank owns a piece of it, so that every rank makes the same collectives.
  std::map<std::vector<int64_t>, at::Tensor> parts;
  for (auto& b : rs.buckets) {
    VESCALE_CHECK(b.grad_shard.defined(), "ZeroOptimizer: no reduced gradient for a bucket; run backward and ",
                  "GradReducer::finish() before clipping");
    for (size_t i : b.params) parts.try_emplace(z.norm_dims[i], at::zeros({}, b.grad_shard.options().dtype(at::kFloat)));
    for (const auto& seg : b.segments)
      parts.at(z.norm_dims[seg.param]).add_(b.grad_shard.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat).square().sum());
  }
  std::vector<dist::Work> works;
  for (auto& [dims, t] : parts) works.push_back(rs.mesh.group_over(rs.dim_names(dims)).all_reduce(t));
  for (auto& w : works) w.wait();
  at::Tensor total;
  for (auto& [dims, t] : parts) total = total.defined() ? total + t : t;
  at::Tensor rest = optim::grad_sum_of_squares(z.rest_params);
  if (rest.defined()) {
    if (dtensor::is_dtensor(rest))
      rest = dtensor::to_local(dtensor::redistribute(rest, dtensor::Placements(rs.mesh.ndim(), dtensor::Replicate())));
    total = total.defined() ? total + rest : rest;
  }
  VESCALE_CHECK(total.defined(), "ZeroOptimizer::clip_grad_norm_: no parameter has a gradient; run backward first");
  at::Tensor norm = total.sqrt();
  if (max_norm > 0) {
    at::Tensor factor = optim::clip_factor(norm, max_norm);
    for (auto& b : rs.buckets) b.grad_shard.mul_(factor.to(b.grad_shard.scalar_type()));
    if (!z.rest_params.empty())
      optim::scale_grads_(z.rest_params,
                          dtensor::from_local(factor, rs.mesh, dtensor::Placements(rs.mesh.ndim(), dtensor::Replicate()),
                                              std::vector<int64_t>{}));
  }
  return norm;
}

void ZeroOptimizer::step() {
  Impl& z = *impl_;
  z.build();
  c10::NoGradGuard no_grad;
  GradReducer::State& rs = z.rs;
  ++z.step;
  std::vector<at::Tensor> gathered(rs.buckets.size());
  std::vector<dist::Work> works(rs.buckets.size());
  for (size_t k = 0; k < rs.buckets.size(); ++k) {
    Bucket& b = rs.buckets[k];
    Impl::Slice& s = z.slices[k];
    VESCALE_CHECK(b.grad_shard.defined(), "ZeroOptimizer::step: no reduced gradient for a bucket; run backward and ",
                  "GradReducer::finish() first");
    for (const auto& seg : b.segments) {
      at::Tensor p = s.param.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor m = s.exp_avg.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor v = s.exp_avg_sq.narrow(0, seg.shard_offset, seg.numel);
      const at::Tensor g = b.grad_shard.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat);
      optim::adamw_update(p, g, m, v, z.step, z.options, z.param_decay[seg.param]);
    }
    gathered[k] = at::empty({b.padded}, s.param.options().dtype(b.dtype));
    works[k] = rs.first_group(b).all_gather(gathered[k], s.param.to(b.dtype));
  }
  z.rest->step();
  for (size_t k = 0; k < rs.buckets.size(); ++k) {
    works[k].wait();
    const Bucket& b = rs.buckets[k];
    for (size_t i : b.params) {
      const ReducerParam& p = rs.params[i];
      dtensor::to_local(p.tensor.detach()).view({-1}).copy_(gathered[k].narrow(0, p.offset, p.numel));
    }
  }
}

void ZeroOptimizer::zero_grad() {
  Impl& z = *impl_;
  for (auto& b : z.rs.buckets) b.grad_shard = at::Tensor();
  if (z.rest) z.rest->zero_grad();
  for (auto& p : z.rs.params) p.tensor.mutable_grad() = at::Tensor();
}

void ZeroOptimizer::set_lr(double lr) {
  impl_->options.lr = lr;
  if (impl_->rest) impl_->rest->set_lr(lr);
}

double ZeroOptimizer::lr() const { return impl_->options.lr; }

int64_t ZeroOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& s : impl_->slices)
    n += 3 * s.param.numel() * static_cast<int64_t>(s.param.element_size());
  return n;
}

}  // namespace vescale::ddp
