#include "vescale/parallel/grad_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/timeline/recorder.h"

namespace vescale::parallel {

namespace {

// Whether redistributing from `got` to `want` moves data between ranks (a Replicate dim made
// Shard or Partial is a local slice or a local zeroing).
bool communicates(const dtensor::Placements& got, const dtensor::Placements& want) {
  for (size_t d = 0; d < got.size(); ++d)
    if (got[d] != want[d] && !(got[d].is_replicate() && (want[d].is_shard() || want[d].is_partial())))
      return true;
  return false;
}

}  // namespace

// Per bucket, this step's progress and buffers.
struct BucketRun {
  int64_t pending = 0;  // params not ready yet this step
  bool launched = false;
  std::string sequence;  // the group of its first collective: launches keep bucket order there
  at::Tensor flat;       // the step's gradients (ZeRO 0/1); ZeRO 2+ drops it once scattered
  dist::Work work;
  at::Tensor slice;  // ZeRO 1+: this rank's reduced slice, after finish()
};

struct GradReducer::Impl {
  const GradLayout& layout;
  GradReducerOptions options;
  std::vector<BucketRun> runs;
  std::vector<bool> ready;                    // per layout param: its gradient is accumulated
  std::vector<bool> told;                     // per layout param: its odd placement was logged
  std::map<std::string, size_t> next_launch;  // per sequence: the next bucket index to launch
  std::deque<size_t> inflight;                // ZeRO 2+: reduce-scatters not waited on yet
  bool sync = true;
  ReduceStats current, last, total;
  std::mutex mu;

  Impl(const GradLayout& l, GradReducerOptions o) : layout(l), options(o) {}

  int zero() const { return layout.options().zero; }
  c10::ScalarType wire_dtype(const LayoutBucket& b) const {
    return options.reduce_bf16 && b.dtype == c10::ScalarType::Float ? c10::ScalarType::BFloat16
                                                                    : b.dtype;
  }
  void count(const at::Tensor& flat) {
    ++current.collectives;
    current.bytes += flat.numel() * static_cast<int64_t>(flat.element_size());
  }
  void on_grad(size_t i);
  void launch_ready(const std::string& sequence);
  void launch(size_t k, bool in_backward);
  // Gradient `g` of layout param i in the placements its bucket takes.
  at::Tensor as_bucket_expects(size_t i, const at::Tensor& g);
  void reset_step();
};

namespace {

// Runs after AccumulateGrad has added this backward's gradient into p.grad().
struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  std::weak_ptr<GradReducer::Impl> impl;
  size_t index;
  ReadyHook(std::weak_ptr<GradReducer::Impl> s, size_t i) : impl(std::move(s)), index(i) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override {
    if (auto s = impl.lock()) s->on_grad(index);
  }
};

}  // namespace

void GradReducer::Impl::on_grad(size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  if (!sync || !options.overlap) return;  // accumulate only / reduce in finish()
  const LayoutParam& p = layout.params()[i];
  if (p.bucket < 0) return;
  BucketRun& run = runs[p.bucket];
  VESCALE_CHECK(
      !run.launched, "GradReducer: parameter '", p.name,
      "' got a second gradient after its bucket was ",
      "launched in this backward; call finish() after each synced backward, and run the earlier ",
      "micro-batches under NoSync");
  if (!ready[i]) ready[i] = true, --run.pending;
  if (run.pending == 0) launch_ready(run.sequence);
}

// Buckets sharing a group launch in bucket order on every rank, so their collectives match up
// even if gradients were ready in another order.
void GradReducer::Impl::launch_ready(const std::string& sequence) {
  size_t& next = next_launch[sequence];
  while (next < runs.size()) {
    BucketRun& run = runs[next];
    if (run.sequence != sequence || run.launched) {
      ++next;
      continue;
    }
    if (run.pending > 0) break;
    launch(next, /*in_backward=*/true);
    ++next;
  }
}

at::Tensor GradReducer::Impl::as_bucket_expects(size_t i, const at::Tensor& g) {
  const LayoutParam& p = layout.params()[i];
  const auto& got = dtensor::spec_of(g).placements;
  if (got == p.grad_placements) return g;
  // Something the layout's rules did not foresee (a transposed shard, the vocab-parallel
  // embedding's whole-table gradient): brought to the bucket's placements first.
  const bool remote = communicates(got, p.grad_placements);
  if (!told[i]) {
    told[i] = true;
    log::debug("gradient of '" + p.name + "' arrives as " + dtensor::to_string(got) +
               "; its bucket takes " + dtensor::to_string(p.grad_placements) +
               (remote ? ": redistributed first, one collective per step" : ": a local slice"));
  }
  at::Tensor out = dtensor::redistribute(g.detach(), p.grad_placements);
  if (remote) {
    ++current.fallbacks;
    count(dtensor::to_local(out));
  }
  return out;
}

void GradReducer::Impl::launch(size_t k, bool in_backward) {
  at::NoGradGuard no_grad;
  const LayoutBucket& b = layout.buckets()[k];
  BucketRun& run = runs[k];
  const auto& params = layout.params();
  const at::Device device = dtensor::to_local(params[b.params.front()].tensor.detach()).device();
  const int64_t size = zero() >= 1 ? b.padded : b.numel;
  run.flat = at::empty({size}, at::TensorOptions().dtype(wire_dtype(b)).device(device));
  if (size > b.numel) run.flat.narrow(0, b.numel, size - b.numel).zero_();
  for (size_t i : b.params) {
    const LayoutParam& p = params[i];
    at::Tensor slot = run.flat.narrow(0, p.offset, p.numel);
    at::Tensor& g = p.tensor.mutable_grad();
    if (!g.defined()) {  // not used on this rank this step: contributes nothing
      slot.zero_();
      continue;
    }
    VESCALE_CHECK(dtensor::is_dtensor(g), "GradReducer: the gradient of '", p.name,
                  "' is a plain tensor; its parameter is a DTensor");
    slot.copy_(dtensor::to_local(as_bucket_expects(i, g)).reshape({-1}));
    g = at::Tensor();  // the bucket holds it now; finish() hands back the reduced one
  }
  dist::ProcessGroup& group = layout.shard_group(b);
  static const uint32_t kBucket = timeline::intern("grad bucket");
  timeline::CommContext context(kBucket, static_cast<int32_t>(k));
  if (zero() >= 2) {  // each rank receives only the slice it owns
    // A reduce-scatter holds a full-size buffer (Gloo: an all-reduce of a copy) until it is
    // waited on: at most two in flight, so the full gradients never all exist at once.
    while (inflight.size() >= 2) {
      BucketRun& oldest = runs[inflight.front()];
      oldest.work.wait();
      oldest.work = dist::Work();
      inflight.pop_front();
    }
    inflight.push_back(k);
    run.slice = at::empty({b.chunk}, run.flat.options());
    run.work = group.reduce_scatter(run.slice, run.flat, b.op);
    count(run.flat);
    run.flat = at::Tensor();  // the collective keeps what it still needs
  } else {
    run.work = group.all_reduce(run.flat, b.op);
    count(run.flat);
  }
  run.launched = true;
  current.overlapped += in_backward ? 1 : 0;
}

void GradReducer::Impl::reset_step() {
  for (size_t k = 0; k < runs.size(); ++k) {
    BucketRun& run = runs[k];
    run.pending = static_cast<int64_t>(layout.buckets()[k].params.size());
    run.launched = false;
    run.flat = at::Tensor();
    run.work = dist::Work();
  }
  std::fill(ready.begin(), ready.end(), false);
  next_launch.clear();
  inflight.clear();
}

GradReducer::GradReducer(const GradLayout& layout, GradReducerOptions options)
    : impl_(std::make_shared<Impl>(layout, options)) {
  Impl& s = *impl_;
  s.runs.resize(layout.buckets().size());
  for (size_t k = 0; k < s.runs.size(); ++k)
    s.runs[k].sequence = layout.shard_group(layout.buckets()[k]).name();
  s.ready.assign(layout.params().size(), false);
  s.told.assign(layout.params().size(), false);
  s.reset_step();
  for (size_t i = 0; i < layout.params().size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(layout.params()[i].tensor,
                                                   std::make_unique<ReadyHook>(impl_, i));
}

GradReducer::~GradReducer() {
  for (const auto& p : impl_->layout.params())
    torch::autograd::impl::set_post_acc_grad_hooks(p.tensor, nullptr);
}

void GradReducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->sync = sync;
}

bool GradReducer::sync() const { return impl_->sync; }

ReduceStats GradReducer::finish() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  VESCALE_CHECK(
      s.sync,
      "GradReducer::finish: called under NoSync; leave the NoSync scope for the last micro-batch");
  at::NoGradGuard no_grad;
  const GradLayout& layout = s.layout;
  const auto& buckets = layout.buckets();
  const auto& mesh = layout.mesh();
  // What backward didn't launch (no overlap, unused params), in bucket order.
  for (size_t k = 0; k < buckets.size(); ++k)
    if (!s.runs[k].launched) {
      s.runs[k].pending = 0;
      s.launch(k, /*in_backward=*/false);
    }
  for (auto& run : s.runs) run.work.wait();
  if (!layout.options().fused) {  // the other dims, one collective each (ZeRO 2+: on the slice)
    for (size_t d = 1;; ++d) {
      bool any = false;
      for (size_t k = 0; k < buckets.size(); ++k)
        if (d < buckets[k].dims.size()) {
          any = true;
          at::Tensor& t = s.zero() >= 2 ? s.runs[k].slice : s.runs[k].flat;
          s.runs[k].work = mesh.group(mesh.dim_names()[buckets[k].dims[d]]).all_reduce(t, buckets[k].op);
          s.count(t);
        }
      if (!any) break;
      for (size_t k = 0; k < buckets.size(); ++k)
        if (d < buckets[k].dims.size()) s.runs[k].work.wait();
    }
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    const LayoutBucket& b = buckets[k];
    BucketRun& run = s.runs[k];
    if (s.zero() >= 1) {
      // The optimizer (ShardedAdamW) reads this rank's slice; the parameters get no grad.
      if (s.zero() == 1) run.slice = run.flat.narrow(0, b.shard_rank * b.chunk, b.chunk).clone();
      run.slice = run.slice.to(b.dtype);
    } else {
      const at::Tensor flat = run.flat.to(b.dtype);  // back from a bf16 wire
      for (size_t i : b.params) {
        const LayoutParam& p = layout.params()[i];
        const auto& spec = dtensor::spec_of(p.tensor);
        // A view of the bucket: the step's flat buffer lives until the grads are dropped.
        p.tensor.mutable_grad() = dtensor::from_local(
            flat.narrow(0, p.offset, p.numel).view(p.local_shape), mesh, spec.placements,
            spec.shape);
      }
    }
    // Freed bucket by bucket (the work holds its buffer too), so that at ZeRO 1 the full
    // buckets and the slices taken from them do not all exist at once.
    run.flat = at::Tensor();
    run.work = dist::Work();
    ++s.current.buckets;
  }
  s.reset_step();
  // Gradients outside the buckets that still differ from their parameter: one by one.
  for (const auto& p : layout.params()) {
    if (p.bucket >= 0) continue;
    at::Tensor& g = p.tensor.mutable_grad();
    if (!g.defined() || !dtensor::is_dtensor(g)) continue;
    const auto& want = dtensor::spec_of(p.tensor).placements;
    if (dtensor::spec_of(g).placements == want) continue;
    g = dtensor::redistribute(g.detach(), want);
    ++s.current.fallbacks;
    ++s.current.collectives;
    s.current.bytes += dtensor::to_local(g).numel() * static_cast<int64_t>(g.element_size());
  }
  s.last = s.current;
  s.total.collectives += s.current.collectives;
  s.total.bytes += s.current.bytes;
  s.total.buckets += s.current.buckets;
  s.total.fallbacks += s.current.fallbacks;
  s.total.overlapped += s.current.overlapped;
  s.current = {};
  return s.last;
}

at::Tensor GradReducer::reduced_slice(size_t k) const { return impl_->runs.at(k).slice; }

void GradReducer::drop_slices() {
  for (auto& run : impl_->runs) run.slice = at::Tensor();
}

const GradLayout& GradReducer::layout() const { return impl_->layout; }
const ReduceStats& GradReducer::last_step() const { return impl_->last; }
const ReduceStats& GradReducer::total() const { return impl_->total; }

}  // namespace vescale::parallel
