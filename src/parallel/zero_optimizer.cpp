#include "vescale/parallel/zero_optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <set>

#include "grad_reducer_state.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/optim/clip_grad.h"

namespace vescale::parallel {

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
  std::vector<double> param_decay;  // per reducer param
  std::vector<std::vector<int64_t>>
      norm_dims;                       // per reducer param: the group its norm term sums over
  std::unique_ptr<optim::AdamW> rest;  // parameters outside the buckets
  std::vector<at::Tensor> rest_params;

  // Stage 3: a unit's bucketed parameters hold storage only from just before its forward (or
  // backward) until just after it; otherwise their values live in the slices.
  enum class Held { Full, Gathering, Freed };
  struct Unit {
    std::vector<size_t> buckets;
    Held held = Held::Full;
    std::vector<at::Tensor> gathered;  // per bucket, while Gathering
    std::vector<dist::Work> works;
    size_t sent = 0;  // buckets of its gradients sent this step
  };
  std::vector<Unit> units;
  std::vector<size_t> param_nbytes;  // per reducer param: its local storage
  bool sharded = false;              // stage 3 hooks installed (after the first step)
  std::vector<vescale::nn::HookHandle> gather_links;  // stage 3: each unit's, once sharded

  explicit Impl(GradReducer::State& s) : rs(s) {}

  void build();
  // Waits for bucket k's parameter all-gather and copies it into the parameters.
  void copy_out(size_t k, std::vector<at::Tensor>& gathered, std::vector<dist::Work>& works);
  void start_gather(size_t u);
  void ensure_full(size_t u);
  void release(size_t u);
  void install_hooks();
  void remove_hooks();
};

namespace {

// FSDP's trick: a parameter keeps its TensorImpl (so autograd's saved references and the
// module's members stay valid) while its storage is dropped and later re-allocated.
void release_storage(const at::Tensor& local) {
  c10::StorageImpl* s = local.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void restore_storage(const at::Tensor& local, size_t nbytes) {
  c10::StorageImpl* s = local.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  VESCALE_CHECK(s->allocator() != nullptr,
                "ZeRO-3: a parameter's storage has no allocator to re-allocate from");
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

at::Tensor local_of(const ReducerParam& p) { return dtensor::to_local(p.tensor.detach()); }

}  // namespace

void ZeroOptimizer::Impl::copy_out(size_t k, std::vector<at::Tensor>& gathered,
                                   std::vector<dist::Work>& works) {
  if (!gathered[k].defined()) return;
  works[k].wait();
  for (size_t i : rs.buckets[k].params) {
    const ReducerParam& p = rs.params[i];
    local_of(p).view({-1}).copy_(gathered[k].narrow(0, p.offset, p.numel));
  }
  gathered[k] = at::Tensor();
  works[k] = dist::Work();
}

void ZeroOptimizer::Impl::start_gather(size_t u) {
  Unit& unit = units[u];
  if (unit.held != Held::Freed) return;
  unit.gathered.clear();
  unit.works.clear();
  for (size_t k : unit.buckets) {
    const Bucket& b = rs.buckets[k];
    unit.gathered.push_back(at::empty({b.padded}, slices[k].param.options().dtype(b.dtype)));
    unit.works.push_back(
        rs.first_group(b).all_gather(unit.gathered.back(), slices[k].param.to(b.dtype)));
  }
  unit.held = Held::Gathering;
}

void ZeroOptimizer::Impl::ensure_full(size_t u) {
  Unit& unit = units[u];
  if (unit.held == Held::Full) return;
  start_gather(u);
  c10::NoGradGuard no_grad;
  for (size_t j = 0; j < unit.buckets.size(); ++j) {
    unit.works[j].wait();
    const Bucket& b = rs.buckets[unit.buckets[j]];
    for (size_t i : b.params) {
      const at::Tensor local = local_of(rs.params[i]);
      restore_storage(local, param_nbytes[i]);
      local.view({-1}).copy_(unit.gathered[j].narrow(0, rs.params[i].offset, rs.params[i].numel));
    }
  }
  unit.gathered.clear();
  unit.works.clear();
  unit.held = Held::Full;
}

void ZeroOptimizer::Impl::release(size_t u) {
  Unit& unit = units[u];
  if (u == 0 || unit.held != Held::Full) return;  // the root unit stays whole
  for (size_t k : unit.buckets)
    for (size_t i : rs.buckets[k].params) release_storage(local_of(rs.params[i]));
  unit.held = Held::Freed;
}

// Each unit's module gathers before its forward and again before its backward (a hook on the
// gradient of its output), prefetching the next unit in that direction; it releases after
// forward, and after the last bucket of its gradients is sent.
void ZeroOptimizer::Impl::install_hooks() {
  for (size_t u = 1; u < units.size(); ++u) {
    vescale::nn::ForwardHooks hooks;
    hooks.around = [this, u](const std::vector<at::Tensor>& in,
                             const vescale::nn::ForwardHooks::Forward& fwd) {
      ensure_full(u);
      if (u + 1 < units.size()) start_gather(u + 1);
      at::Tensor out = fwd(in);
      if (out.requires_grad())
        out.register_hook([this, u](const at::Tensor&) {
          ensure_full(u);
          if (u > 1) start_gather(u - 1);
        });
      release(u);
      return out;
    };
    gather_links.push_back(vescale::nn::add_forward_hook(
        *rs.unit_modules[u - 1], vescale::nn::HookSlot::ZeroGather, std::move(hooks)));
  }
  rs.on_bucket_sent = [this](size_t k) {
    Unit& unit = units[rs.buckets[k].unit];
    if (++unit.sent == unit.buckets.size()) release(rs.buckets[k].unit);
  };
  sharded = true;
}

void ZeroOptimizer::Impl::remove_hooks() {
  gather_links.clear();
  rs.on_bucket_sent = nullptr;
}

// The layout exists once the reducer's first finish() has run.
void ZeroOptimizer::Impl::build() {
  if (built) return;
  VESCALE_CHECK(
      rs.layout_built,
      "ZeroOptimizer: call GradReducer::finish() after backward, before clipping or stepping");
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
      const at::Tensor local =
          dtensor::to_local(rs.params[seg.param].tensor.detach()).reshape({-1});
      s.param.narrow(0, seg.shard_offset, seg.numel)
          .copy_(local.narrow(0, seg.param_offset, seg.numel));
    }
    s.exp_avg = at::zeros_like(s.param);
    s.exp_avg_sq = at::zeros_like(s.param);
    slices.push_back(std::move(s));
  }
  if (rs.options.zero >= 3) {
    units.resize(rs.unit_modules.size() + 1);
    for (size_t k = 0; k < rs.buckets.size(); ++k) units[rs.buckets[k].unit].buckets.push_back(k);
    param_nbytes.assign(rs.params.size(), 0);
    for (size_t i = 0; i < rs.params.size(); ++i) {
      const at::Tensor local = local_of(rs.params[i]);
      VESCALE_CHECK(
          local.is_contiguous() && local.storage_offset() == 0 &&
              local.storage().nbytes() == static_cast<size_t>(local.numel()) * local.element_size(),
          "ZeRO-3: parameter '", rs.params[i].name,
          "' does not own its storage; it cannot be released");
      param_nbytes[i] = local.storage().nbytes();
    }
  }
  built = true;
}

ZeroOptimizer::ZeroOptimizer(GradReducer& reducer, std::vector<optim::ParamGroup> groups,
                             optim::AdamWOptions options)
    : impl_(std::make_unique<Impl>(reducer.state())) {
  VESCALE_CHECK(impl_->rs.options.zero < 3 || !impl_->rs.unit_modules.empty(),
                "ZeroOptimizer: ZeRO-3 needs units; set GradReducerOptions::unit_pattern (e.g. "
                "\"layers.*\")");
  VESCALE_CHECK(impl_->rs.options.zero >= 1,
                "ZeroOptimizer: the GradReducer was built with zero=", impl_->rs.options.zero,
                "; build it with GradReducerOptions::zero >= 1 (parallel.zero in the config)");
  impl_->groups = std::move(groups);
  impl_->options = options;
  if (impl_->rs.options.zero >= 3) {
    // The reducer laid out its buckets up front: the blocks become slices before their first use.
    impl_->build();
    for (size_t u = 1; u < impl_->units.size(); ++u) impl_->release(u);
    impl_->install_hooks();
  }
}

ZeroOptimizer::~ZeroOptimizer() {
  if (!impl_->sharded) return;
  impl_->remove_hooks();
  for (size_t u = 0; u < impl_->units.size(); ++u)
    impl_->ensure_full(u);  // hand back whole parameters
}

void ZeroOptimizer::gather_params() {
  Impl& z = *impl_;
  for (size_t u = 0; u < z.units.size(); ++u) z.ensure_full(u);
}

at::Tensor ZeroOptimizer::clip_grad_norm_(double max_norm) {
  Impl& z = *impl_;
  z.build();
  c10::NoGradGuard no_grad;
  GradReducer::State& rs = z.rs;
  // One partial sum per reduction group, created for every bucketed parameter whether or not
  // this rank owns a piece of it, so that every rank makes the same collectives.
  std::map<std::vector<int64_t>, at::Tensor> parts;
  for (auto& b : rs.buckets) {
    VESCALE_CHECK(b.grad_shard.defined(),
                  "ZeroOptimizer: no reduced gradient for a bucket; run backward and ",
                  "GradReducer::finish() before clipping");
    for (size_t i : b.params)
      parts.try_emplace(z.norm_dims[i], at::zeros({}, b.grad_shard.options().dtype(at::kFloat)));
    for (const auto& seg : b.segments)
      parts.at(z.norm_dims[seg.param])
          .add_(b.grad_shard.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat).square().sum());
  }
  std::vector<dist::Work> works;
  for (auto& [dims, t] : parts)
    works.push_back(rs.mesh.group_over(rs.dim_names(dims)).all_reduce(t));
  for (auto& w : works) w.wait();
  at::Tensor total;
  for (auto& [dims, t] : parts) total = total.defined() ? total + t : t;
  at::Tensor rest = optim::grad_sum_of_squares(z.rest_params);
  if (rest.defined()) {
    if (dtensor::is_dtensor(rest))
      rest = dtensor::to_local(
          dtensor::redistribute(rest, dtensor::Placements(rs.mesh.ndim(), dtensor::Replicate())));
    total = total.defined() ? total + rest : rest;
  }
  VESCALE_CHECK(total.defined(),
                "ZeroOptimizer::clip_grad_norm_: no parameter has a gradient; run backward first");
  if (norm_across_) total = norm_across_(total);
  at::Tensor norm = total.sqrt();
  if (max_norm > 0) {
    at::Tensor factor = optim::clip_factor(norm, max_norm);
    for (auto& b : rs.buckets) b.grad_shard.mul_(factor.to(b.grad_shard.scalar_type()));
    if (!z.rest_params.empty())
      optim::scale_grads_(
          z.rest_params,
          dtensor::from_local(factor, rs.mesh,
                              dtensor::Placements(rs.mesh.ndim(), dtensor::Replicate()),
                              std::vector<int64_t>{}));
  }
  return norm;
}

at::Tensor ZeroOptimizer::param_sum_of_squares() const {
  const Impl& z = *impl_;
  if (!z.built) return {};
  std::vector<at::Tensor> mine = z.rest_params;
  for (const auto& s : z.slices) mine.push_back(s.param);
  return optim::local_sum_of_squares(mine);
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
    VESCALE_CHECK(b.grad_shard.defined(),
                  "ZeroOptimizer::step: no reduced gradient for a bucket; run backward and ",
                  "GradReducer::finish() first");
    for (const auto& seg : b.segments) {
      at::Tensor p = s.param.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor m = s.exp_avg.narrow(0, seg.shard_offset, seg.numel);
      at::Tensor v = s.exp_avg_sq.narrow(0, seg.shard_offset, seg.numel);
      const at::Tensor g = b.grad_shard.narrow(0, seg.shard_offset, seg.numel).to(at::kFloat);
      optim::adamw_update(p, g, m, v, z.step, z.options, z.param_decay[seg.param]);
    }
    // Two buckets in flight at most: each gathered buffer is a whole bucket.
    if (k > 0) z.copy_out(k - 1, gathered, works);
    if (rs.options.zero >= 3 && b.unit != 0) continue;  // gathered when next used
    gathered[k] = at::empty({b.padded}, s.param.options().dtype(b.dtype));
    works[k] = rs.first_group(b).all_gather(gathered[k], s.param.to(b.dtype));
  }
  if (!rs.buckets.empty()) z.copy_out(rs.buckets.size() - 1, gathered, works);
  z.rest->step();
  if (rs.options.zero >= 3) {
    // The slices hold the new values; the units' full parameters are stale: drop them.
    for (size_t u = 1; u < z.units.size(); ++u) {
      Impl::Unit& unit = z.units[u];
      if (unit.held == Impl::Held::Gathering) {  // a prefetch of the old values: drop it
        for (auto& w : unit.works) w.wait();
        unit.gathered.clear();
        unit.works.clear();
        unit.held = Impl::Held::Freed;
      }
      z.release(u);  // a whole unit (the first step's, or one used since) holds old values
    }
    for (auto& unit : z.units) unit.sent = 0;
    if (!z.sharded) z.install_hooks();
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

void ZeroOptimizer::prepare() { impl_->build(); }
bool ZeroOptimizer::prepared() const { return impl_->built; }

std::vector<ZeroOptimizer::StateRange> ZeroOptimizer::state_ranges() {
  Impl& z = *impl_;
  VESCALE_CHECK(
      z.built,
      "ZeroOptimizer::state_ranges: no layout yet; call prepare() after GradReducer::finish()");
  const auto& coord = z.rs.mesh.coordinate();
  std::vector<StateRange> out;
  for (size_t k = 0; k < z.rs.buckets.size(); ++k) {
    const Bucket& b = z.rs.buckets[k];
    for (const auto& seg : b.segments) {
      const ReducerParam& p = z.rs.params[seg.param];
      // Ranks that differ only on a dim the parameter is replicated on, outside the bucket's
      // slicing, hold the same range: the one at coordinate 0 there saves it.
      const auto& placements = dtensor::spec_of(p.tensor).placements;
      const std::vector<int64_t> sliced =
          z.rs.options.fused ? b.dims : std::vector<int64_t>{b.dims[0]};
      bool owner = true;
      for (size_t d = 0; d < placements.size(); ++d) {
        const bool in_slice =
            std::find(sliced.begin(), sliced.end(), static_cast<int64_t>(d)) != sliced.end();
        if (placements[d].is_replicate() && !in_slice && coord[d] != 0) owner = false;
      }
      const int64_t begin = seg.param_offset, end = seg.param_offset + seg.numel;
      out.push_back({p.name + ".exp_avg", p.tensor, begin, end,
                     z.slices[k].exp_avg.narrow(0, seg.shard_offset, seg.numel), owner});
      out.push_back({p.name + ".exp_avg_sq", p.tensor, begin, end,
                     z.slices[k].exp_avg_sq.narrow(0, seg.shard_offset, seg.numel), owner});
    }
  }
  return out;
}

std::vector<std::string> ZeroOptimizer::bucketed_names() const {
  std::vector<std::string> out;
  for (const auto& p : impl_->rs.params)
    if (p.bucket >= 0) out.push_back(p.name);
  return out;
}

int64_t ZeroOptimizer::step_count() const { return impl_->step; }
void ZeroOptimizer::set_step_count(int64_t steps) { impl_->step = steps; }

std::map<std::string, at::Tensor> ZeroOptimizer::rest_state_dict() const {
  return impl_->rest ? impl_->rest->state_dict() : std::map<std::string, at::Tensor>{};
}

void ZeroOptimizer::load_rest_state_dict(const std::map<std::string, at::Tensor>& state) {
  VESCALE_CHECK(impl_->rest, "ZeroOptimizer::load_rest_state_dict: call prepare() first");
  impl_->rest->load_state_dict(state);
}

void ZeroOptimizer::reload_params() {
  Impl& z = *impl_;
  if (!z.built) return;  // build() reads them when it runs
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < z.rs.buckets.size(); ++k) {
    for (const auto& seg : z.rs.buckets[k].segments) {
      const at::Tensor local =
          dtensor::to_local(z.rs.params[seg.param].tensor.detach()).reshape({-1});
      z.slices[k]
          .param.narrow(0, seg.shard_offset, seg.numel)
          .copy_(local.narrow(0, seg.param_offset, seg.numel));
    }
  }
}

int64_t ZeroOptimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& s : impl_->slices)
    n += 3 * s.param.numel() * static_cast<int64_t>(s.param.element_size());
  return n;
}

// Checkpoints -------------------------------------------------------------------------------

std::vector<dtensor::TensorBox> ZeroOptimizer::state_boxes(bool all) {
  std::vector<dtensor::TensorBox> out;
  for (const auto& r : state_ranges()) {
    if (!r.owner && !all) continue;
    const auto& spec = dtensor::spec_of(r.param);
    const auto local_offset = spec.local_offset();
    for (const auto& box : dtensor::flat_range_boxes(spec.local_shape(), r.begin, r.end)) {
      int64_t n = 1;
      for (int64_t d : box.shape) n *= d;
      dtensor::TensorBox p{r.name, r.values.narrow(0, box.flat_begin - r.begin, n).view(box.shape),
                           spec.shape, box.offsets};
      for (size_t d = 0; d < p.offsets.size(); ++d) p.offsets[d] += local_offset[d];
      out.push_back(std::move(p));
    }
  }
  return out;
}

optim::OptimizerState ZeroOptimizer::state_to_save() {
  optim::OptimizerState out;
  out.tensors = rest_state_dict();
  if (prepared() && step_count() > 0) {
    for (const auto& name : bucketed_names())
      out.tensors[name + ".step"] = at::scalar_tensor(step_count(), at::kLong);
    out.pieces = state_boxes(/*all=*/false);
  }
  return out;
}

optim::OptimizerState ZeroOptimizer::state_to_load(
    const std::map<std::string, std::vector<int64_t>>& saved) {
  prepare();
  const auto names = bucketed_names();
  const std::set<std::string> bucketed(names.begin(), names.end());
  optim::NamedParams all;
  for (const auto& g : impl_->groups) all.insert(all.end(), g.params.begin(), g.params.end());
  loading_rest_ = optim::adamw_state_targets(
      all, saved, [&](const std::string& n) { return !bucketed.count(n); });
  loading_steps_.clear();
  for (const auto& n : names)
    if (saved.count(n + ".step")) loading_steps_[n] = at::zeros({}, at::kLong);
  optim::OptimizerState out;
  out.tensors = loading_rest_;
  for (const auto& [n, t] : loading_steps_) out.tensors[n + ".step"] = t;
  if (!loading_steps_.empty()) out.pieces = state_boxes(/*all=*/true);
  return out;
}

void ZeroOptimizer::loaded() {
  load_rest_state_dict(loading_rest_);
  int64_t step = 0;
  for (const auto& [n, t] : loading_steps_) {
    const int64_t s = t.item<int64_t>();
    VESCALE_CHECK(step == 0 || s == step,
                  "checkpoint: AdamW step counts differ between parameters (", s, " vs ", step,
                  "); ZeRO keeps one count for all bucketed parameters");
    step = s;
  }
  set_step_count(step);
  loading_rest_.clear();
  loading_steps_.clear();
}

}  // namespace vescale::parallel
