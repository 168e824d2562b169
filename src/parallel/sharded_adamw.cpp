#include "vescale/parallel/sharded_adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <set>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/optim/clip_grad.h"

namespace vescale::parallel {

struct ShardedAdamW::Impl {
  GradReducer& reducer;
  const GradLayout& layout;
  ShardedParameters* sharded;
  std::vector<optim::ParamGroup> groups;
  optim::AdamWOptions options;
  int64_t step = 0;

  // Per bucket: this rank's slice of the parameters (fp32 master values; under ZeRO-3 the
  // units' are ShardedParameters' slices) and its moments.
  struct Slice {
    at::Tensor param, exp_avg, exp_avg_sq;
  };
  std::vector<Slice> slices;
  std::vector<double> param_decay;              // per layout param
  std::vector<std::vector<int64_t>> norm_dims;  // per layout param: the group its norm sums over
  std::unique_ptr<optim::AdamW> rest;           // parameters outside the buckets
  std::vector<at::Tensor> rest_params;

  Impl(GradReducer& r, ShardedParameters* s) : reducer(r), layout(r.layout()), sharded(s) {}

  at::Tensor local_flat(size_t i) const {
    return dtensor::to_local(layout.params()[i].tensor.detach()).reshape({-1});
  }
  // Rereads every slice from the parameters (whole ones).
  void read_params();
  // Waits for bucket k's all-gather and copies it into the parameters.
  void copy_out(size_t k, std::vector<at::Tensor>& gathered, std::vector<dist::Work>& works);
  // This rank's ranges of the moments as boxes of the parameters' global shapes; `all`: every
  // range it holds (to load into), else only those it saves (each range once over the ranks).
  std::vector<dtensor::TensorBox> state_boxes(bool all);
  std::vector<std::string> bucketed_names() const;
};

void ShardedAdamW::Impl::read_params() {
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < layout.buckets().size(); ++k)
    for (const auto& seg : layout.buckets()[k].segments)
      slices[k].param.narrow(0, seg.shard_offset, seg.numel)
          .copy_(local_flat(seg.param).narrow(0, seg.param_offset, seg.numel));
}

void ShardedAdamW::Impl::copy_out(size_t k, std::vector<at::Tensor>& gathered,
                                  std::vector<dist::Work>& works) {
  if (!gathered[k].defined()) return;
  works[k].wait();
  for (size_t i : layout.buckets()[k].params) {
    const LayoutParam& p = layout.params()[i];
    dtensor::to_local(p.tensor.detach()).view({-1}).copy_(gathered[k].narrow(0, p.offset, p.numel));
  }
  gathered[k] = at::Tensor();
  works[k] = dist::Work();
}

ShardedAdamW::ShardedAdamW(GradReducer& reducer, ShardedParameters* sharded,
                           std::vector<optim::ParamGroup> groups, optim::AdamWOptions options)
    : impl_(std::make_unique<Impl>(reducer, sharded)) {
  Impl& z = *impl_;
  const GradLayout& layout = z.layout;
  VESCALE_CHECK(layout.options().zero >= 1, "ShardedAdamW: the gradient layout has zero=",
                layout.options().zero,
                "; build it with GradLayoutOptions::zero >= 1 (parallel.zero in the config)");
  VESCALE_CHECK(layout.options().zero < 3 || sharded,
                "ShardedAdamW: ZeRO-3 steps the slices of ShardedParameters; pass them");
  z.groups = std::move(groups);
  z.options = options;
  c10::NoGradGuard no_grad;
  std::set<std::string> bucketed;
  for (const auto& p : layout.params())
    if (p.bucket >= 0) bucketed.insert(p.name);
  std::map<std::string, double> weight_decay;
  std::vector<optim::ParamGroup> rest_groups;
  for (const auto& g : z.groups) {
    optim::ParamGroup r{{}, g.weight_decay};
    for (const auto& [name, p] : g.params) {
      weight_decay[name] = g.weight_decay;
      if (bucketed.count(name) == 0) r.params.emplace_back(name, p), z.rest_params.push_back(p);
    }
    if (!r.params.empty()) rest_groups.push_back(std::move(r));
  }
  z.rest = std::make_unique<optim::AdamW>(std::move(rest_groups), options);

  const auto& params = layout.params();
  z.param_decay.assign(params.size(), 0.0);
  z.norm_dims.assign(params.size(), {});
  for (size_t k = 0; k < layout.buckets().size(); ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    for (size_t i : b.params) {
      auto it = weight_decay.find(params[i].name);
      VESCALE_CHECK(it != weight_decay.end(), "ShardedAdamW: parameter '", params[i].name,
                    "' is in a gradient bucket but in no optimizer group; pass every parameter");
      z.param_decay[i] = it->second;
      z.norm_dims[i] = layout.norm_dims(b, params[i]);
    }
    Impl::Slice s;
    if (sharded && sharded->holds(k)) {
      s.param = sharded->slice(k);  // stepped in place; gathered at the unit's next use
    } else {
      const at::Tensor first = dtensor::to_local(params[b.params.front()].tensor.detach());
      s.param = at::zeros({b.chunk}, first.options().dtype(at::kFloat));
      for (const auto& seg : b.segments)
        s.param.narrow(0, seg.shard_offset, seg.numel)
            .copy_(z.local_flat(seg.param).narrow(0, seg.param_offset, seg.numel));
    }
    s.exp_avg = at::zeros_like(s.param);
    s.exp_avg_sq = at::zeros_like(s.param);
    z.slices.push_back(std::move(s));
  }
}

ShardedAdamW::~ShardedAdamW() = default;

at::Tensor ShardedAdamW::clip_grad_norm_(double max_norm, const optim::SumAcross& across) {
  Impl& z = *impl_;
  c10::NoGradGuard no_grad;
  const GradLayout& layout = z.layout;
  const auto& mesh = layout.mesh();
  // One partial sum per reduction group, created for every bucketed parameter whether or not
  // this rank owns a piece of it, so that every rank makes the same collectives.
  std::map<std::vector<int64_t>, at::Tensor> parts;
  for (size_t k = 0; k < layout.buckets().size(); ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    const at::Tensor grad = z.reducer.reduced_slice(k);
    VESCALE_CHECK(grad.defined(), "ShardedAdamW: no reduced gradient for a bucket; run backward ",
                  "and GradReducer::finish() before clipping");
    for (size_t i : b.params)
      parts.try_emplace(z.norm_dims[i], at::zeros({}, grad.options().dtype(at::kFloat)));
    for (const auto& seg : b.segments)
      parts.at(z.norm_dims[seg.param])
          .add_(grad.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat).square().sum());
  }
  std::vector<dist::Work> works;
  for (auto& [dims, t] : parts)
    works.push_back(mesh.group_over(layout.dim_names(dims)).all_reduce(t));
  for (auto& w : works) w.wait();
  at::Tensor total;
  for (auto& [dims, t] : parts) total = total.defined() ? total + t : t;
  at::Tensor rest = optim::grad_sum_of_squares(z.rest_params);
  if (rest.defined()) {
    if (dtensor::is_dtensor(rest))
      rest = dtensor::to_local(
          dtensor::redistribute(rest, dtensor::Placements(mesh.ndim(), dtensor::Replicate())));
    total = total.defined() ? total + rest : rest;
  }
  VESCALE_CHECK(total.defined(),
                "ShardedAdamW::clip_grad_norm_: no parameter has a gradient; run backward first");
  if (across) total = across(total);
  at::Tensor norm = total.sqrt();
  if (max_norm > 0) {
    at::Tensor factor = optim::clip_factor(norm, max_norm);
    for (size_t k = 0; k < layout.buckets().size(); ++k) {
      at::Tensor grad = z.reducer.reduced_slice(k);
      grad.mul_(factor.to(grad.scalar_type()));
    }
    if (!z.rest_params.empty())
      optim::scale_grads_(
          z.rest_params,
          dtensor::from_local(factor, mesh, dtensor::Placements(mesh.ndim(), dtensor::Replicate()),
                              std::vector<int64_t>{}));
  }
  return norm;
}

at::Tensor ShardedAdamW::param_sum_of_squares() const {
  const Impl& z = *impl_;
  std::vector<at::Tensor> mine;
  std::vector<double> shares;
  for (const auto& p : z.rest_params) {
    mine.push_back(p);
    shares.push_back(1.0 / static_cast<double>(optim::holders(p)));
  }
  // A slice's values are held once over its shard group, and by every rank of the mesh dims
  // outside it where the parameter is Replicate.
  const GradLayout& layout = z.layout;
  for (size_t k = 0; k < layout.buckets().size(); ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    for (const auto& seg : b.segments) {
      const LayoutParam& p = layout.params()[seg.param];
      const auto& placements = dtensor::spec_of(p.tensor).placements;
      const auto sliced = layout.norm_dims(b, p);
      int64_t n = 1;
      for (size_t d = 0; d < placements.size(); ++d)
        if (placements[d].is_replicate() &&
            std::find(sliced.begin(), sliced.end(), static_cast<int64_t>(d)) == sliced.end())
          n *= layout.mesh().size(layout.mesh().dim_names()[d]);
      mine.push_back(z.slices[k].param.narrow(0, seg.shard_offset, seg.numel));
      shares.push_back(1.0 / static_cast<double>(n));
    }
  }
  return optim::local_sum_of_squares(mine, shares);
}

void ShardedAdamW::step() {
  Impl& z = *impl_;
  c10::NoGradGuard no_grad;
  const GradLayout& layout = z.layout;
  const size_t n = layout.buckets().size();
  ++z.step;
  std::vector<at::Tensor> gathered(n);
  std::vector<dist::Work> works(n);
  for (size_t k = 0; k < n; ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    Impl::Slice& s = z.slices[k];
    const at::Tensor grad = z.reducer.reduced_slice(k);
    VESCALE_CHECK(grad.defined(), "ShardedAdamW::step: no reduced gradient for a bucket; run ",
                  "backward and GradReducer::finish() first");
    for (const auto& seg : b.segments) {
      at::Tensor p = s.param.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor m = s.exp_avg.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor v = s.exp_avg_sq.narrow(0, seg.shard_offset, seg.numel);
      const at::Tensor g = grad.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat);
      optim::adamw_update(p, g, m, v, z.step, z.options, z.param_decay[seg.param]);
    }
    // One gathered bucket at a time, a whole bucket each: the previous one is copied out and
    // freed before the next is gathered, while this bucket's update overlaps its gather.
    if (k > 0) z.copy_out(k - 1, gathered, works);
    if (z.sharded && z.sharded->holds(k)) continue;  // gathered at the unit's next use
    gathered[k] = at::empty({b.padded}, s.param.options().dtype(b.dtype));
    works[k] = layout.shard_group(b).all_gather(gathered[k], s.param.to(b.dtype));
  }
  if (n > 0) z.copy_out(n - 1, gathered, works);
  z.rest->step();
  if (z.sharded) z.sharded->values_changed();
}

void ShardedAdamW::zero_grad() {
  Impl& z = *impl_;
  z.reducer.drop_slices();
  z.rest->zero_grad();
  for (const auto& p : z.layout.params()) p.tensor.mutable_grad() = at::Tensor();
}

void ShardedAdamW::set_lr(double lr) {
  impl_->options.lr = lr;
  impl_->rest->set_lr(lr);
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t n = 0;
  for (const auto& s : impl_->slices)
    n += 3 * s.param.numel() * static_cast<int64_t>(s.param.element_size());
  return n;
}

// Checkpoints -------------------------------------------------------------------------------

std::vector<std::string> ShardedAdamW::Impl::bucketed_names() const {
  std::vector<std::string> out;
  for (const auto& p : layout.params())
    if (p.bucket >= 0) out.push_back(p.name);
  return out;
}

std::vector<dtensor::TensorBox> ShardedAdamW::Impl::state_boxes(bool all) {
  const auto& coord = layout.mesh().coordinate();
  std::vector<dtensor::TensorBox> out;
  for (size_t k = 0; k < layout.buckets().size(); ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    const std::vector<int64_t> sliced =
        layout.options().fused ? b.dims : std::vector<int64_t>{b.dims[0]};
    for (const auto& seg : b.segments) {
      const LayoutParam& p = layout.params()[seg.param];
      const auto& spec = dtensor::spec_of(p.tensor);
      // Ranks that differ only on a dim the parameter is replicated on, outside the bucket's
      // slicing, hold the same range: the one at coordinate 0 there saves it.
      bool owner = true;
      for (size_t d = 0; d < spec.placements.size(); ++d) {
        const bool in_slice =
            std::find(sliced.begin(), sliced.end(), static_cast<int64_t>(d)) != sliced.end();
        if (spec.placements[d].is_replicate() && !in_slice && coord[d] != 0) owner = false;
      }
      if (!owner && !all) continue;
      const int64_t begin = seg.param_offset, end = seg.param_offset + seg.numel;
      const auto local_offset = spec.local_offset();
      for (const auto& [field, values] :
           {std::pair<const char*, at::Tensor>{"exp_avg", slices[k].exp_avg},
            std::pair<const char*, at::Tensor>{"exp_avg_sq", slices[k].exp_avg_sq}}) {
        const at::Tensor range = values.narrow(0, seg.shard_offset, seg.numel);
        for (const auto& box : dtensor::flat_range_boxes(spec.local_shape(), begin, end)) {
          int64_t numel = 1;
          for (int64_t d : box.shape) numel *= d;
          dtensor::TensorBox piece{p.name + "." + field,
                                   range.narrow(0, box.flat_begin - begin, numel).view(box.shape),
                                   spec.shape, box.offsets};
          for (size_t d = 0; d < piece.offsets.size(); ++d) piece.offsets[d] += local_offset[d];
          out.push_back(std::move(piece));
        }
      }
    }
  }
  return out;
}

optim::OptimizerState ShardedAdamW::state_dict() {
  Impl& z = *impl_;
  optim::OptimizerState out;
  out.tensors = z.rest->state_tensors();
  if (z.step > 0) {
    for (const auto& name : z.bucketed_names())
      out.tensors[name + ".step"] = at::scalar_tensor(z.step, at::kLong);
    out.pieces = z.state_boxes(/*all=*/false);
  }
  return out;
}

void ShardedAdamW::load_state_dict(const std::map<std::string, std::vector<int64_t>>& saved,
                                   const optim::ReadState& read) {
  Impl& z = *impl_;
  const auto names = z.bucketed_names();
  const std::set<std::string> bucketed(names.begin(), names.end());
  optim::NamedParams all;
  for (const auto& g : z.groups) all.insert(all.end(), g.params.begin(), g.params.end());
  optim::OptimizerState targets;
  targets.tensors = optim::adamw_state_targets(
      all, saved, [&](const std::string& n) { return !bucketed.count(n); });
  std::map<std::string, at::Tensor> steps;
  for (const auto& n : names)
    if (saved.count(n + ".step")) steps[n] = targets.tensors[n + ".step"] = at::zeros({}, at::kLong);
  if (!steps.empty()) targets.pieces = z.state_boxes(/*all=*/true);
  read(targets);
  for (const auto& [n, t] : steps) targets.tensors.erase(n + ".step");
  z.rest->load_state_tensors(targets.tensors);
  int64_t step = 0;
  for (const auto& [n, t] : steps) {
    const int64_t s = t.item<int64_t>();
    VESCALE_CHECK(step == 0 || s == step,
                  "checkpoint: AdamW step counts differ between parameters (", s, " vs ", step,
                  "); ZeRO keeps one count for all bucketed parameters");
    step = s;
  }
  z.step = step;
  z.read_params();
}

}  // namespace vescale::parallel
