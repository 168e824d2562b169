#include "vescale/parallel/sharded_parameters.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/nn/module.h>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/nn/module_hooks.h"

namespace vescale::parallel {

namespace {

// The parameter keeps its TensorImpl while its storage is dropped and later re-allocated.
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

at::Tensor local_of(const LayoutParam& p) { return dtensor::to_local(p.tensor.detach()); }

}  // namespace

struct ShardedParameters::Impl {
  const GradLayout& layout;
  std::vector<at::Tensor> slices;  // per bucket of a non-root unit: this rank's fp32 values
  // A unit's parameters hold storage only from just before its forward (or backward) until
  // just after it; otherwise their values live in the slices.
  enum class Held { Full, Gathering, Freed };
  struct Unit {
    std::vector<size_t> buckets;
    Held held = Held::Full;
    std::vector<at::Tensor> gathered;  // per bucket, while Gathering
    std::vector<dist::Work> works;
  };
  std::vector<Unit> units;  // units[0] is the root, never released
  std::vector<size_t> param_nbytes;
  std::vector<nn::HookHandle> links;

  explicit Impl(const GradLayout& l) : layout(l) {}

  void start_gather(size_t u) {
    Unit& unit = units[u];
    if (unit.held != Held::Freed) return;
    unit.gathered.clear();
    unit.works.clear();
    for (size_t k : unit.buckets) {
      const LayoutBucket& b = layout.buckets()[k];
      unit.gathered.push_back(at::empty({b.padded}, slices[k].options().dtype(b.dtype)));
      unit.works.push_back(
          layout.shard_group(b).all_gather(unit.gathered.back(), slices[k].to(b.dtype)));
    }
    unit.held = Held::Gathering;
  }

  void ensure_full(size_t u) {
    Unit& unit = units[u];
    if (unit.held == Held::Full) return;
    start_gather(u);
    c10::NoGradGuard no_grad;
    const auto& params = layout.params();
    for (size_t j = 0; j < unit.buckets.size(); ++j) {
      unit.works[j].wait();
      for (size_t i : layout.buckets()[unit.buckets[j]].params) {
        const at::Tensor local = local_of(params[i]);
        restore_storage(local, param_nbytes[i]);
        local.view({-1}).copy_(unit.gathered[j].narrow(0, params[i].offset, params[i].numel));
      }
    }
    unit.gathered.clear();
    unit.works.clear();
    unit.held = Held::Full;
  }

  void release(size_t u) {
    Unit& unit = units[u];
    if (u == 0 || unit.held != Held::Full) return;
    for (size_t k : unit.buckets)
      for (size_t i : layout.buckets()[k].params) release_storage(local_of(layout.params()[i]));
    unit.held = Held::Freed;
  }

  // A unit gathers before its forward and before its backward (prefetching the next unit in
  // that direction) and releases after each: after forward at once, after backward when the
  // gradient of its input is complete.
  void install_links() {
    for (size_t u = 1; u < units.size(); ++u) {
      nn::ForwardHooks hooks;
      hooks.around = [this, u](const std::vector<at::Tensor>& in,
                               const nn::ForwardHooks::Forward& fwd) {
        ensure_full(u);
        if (u + 1 < units.size()) start_gather(u + 1);
        at::Tensor out = fwd(in);
        if (out.requires_grad())
          out.register_hook([this, u](const at::Tensor&) {
            ensure_full(u);
            if (u > 1) start_gather(u - 1);
          });
        if (!in.empty() && in[0].defined() && in[0].requires_grad())
          in[0].register_hook([this, u](const at::Tensor&) { release(u); });
        release(u);
        return out;
      };
      links.push_back(nn::add_forward_hook(*layout.unit_modules()[u - 1], nn::HookSlot::ZeroGather,
                                           std::move(hooks)));
    }
  }
};

ShardedParameters::ShardedParameters(const GradLayout& layout)
    : impl_(std::make_unique<Impl>(layout)) {
  Impl& z = *impl_;
  VESCALE_CHECK(layout.options().zero >= 3 && layout.num_units() > 0,
                "ShardedParameters: the layout must be ZeRO-3's, with units (zero=3 and a "
                "unit_pattern such as \"layers.*\")");
  c10::NoGradGuard no_grad;
  const auto& params = layout.params();
  z.param_nbytes.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor local = local_of(params[i]);
    VESCALE_CHECK(
        local.is_contiguous() && local.storage_offset() == 0 &&
            local.storage().nbytes() == static_cast<size_t>(local.numel()) * local.element_size(),
        "ZeRO-3: parameter '", params[i].name, "' does not own its storage; it cannot be released");
    z.param_nbytes[i] = local.storage().nbytes();
  }
  z.units.resize(layout.unit_modules().size() + 1);
  z.slices.resize(layout.buckets().size());
  for (size_t k = 0; k < layout.buckets().size(); ++k) {
    const LayoutBucket& b = layout.buckets()[k];
    z.units[b.unit].buckets.push_back(k);
    if (b.unit == 0) continue;
    const at::Tensor first = local_of(params[b.params.front()]);
    z.slices[k] = at::zeros({b.chunk}, first.options().dtype(at::kFloat));
    for (const auto& seg : b.segments)
      z.slices[k].narrow(0, seg.shard_offset, seg.numel)
          .copy_(local_of(params[seg.param]).reshape({-1}).narrow(0, seg.param_offset, seg.numel));
  }
  for (size_t u = 1; u < z.units.size(); ++u) z.release(u);
  z.install_links();
}

ShardedParameters::~ShardedParameters() {
  impl_->links.clear();
  for (size_t u = 0; u < impl_->units.size(); ++u) impl_->ensure_full(u);  // whole again
}

bool ShardedParameters::holds(size_t k) const { return impl_->slices.at(k).defined(); }

at::Tensor ShardedParameters::slice(size_t k) const {
  VESCALE_CHECK(holds(k), "ShardedParameters: bucket ", k, " belongs to the root unit, which "
                "stays whole");
  return impl_->slices[k];
}

void ShardedParameters::values_changed() {
  Impl& z = *impl_;
  for (size_t u = 1; u < z.units.size(); ++u) {
    Impl::Unit& unit = z.units[u];
    if (unit.held == Impl::Held::Gathering) {  // a prefetch of the old values: drop it
      for (auto& w : unit.works) w.wait();
      unit.gathered.clear();
      unit.works.clear();
      unit.held = Impl::Held::Freed;
    }
    z.release(u);  // a whole unit (one used since its last release) holds old values
  }
}

void ShardedParameters::gather_all() {
  for (size_t u = 0; u < impl_->units.size(); ++u) impl_->ensure_full(u);
}

}  // namespace vescale::parallel
