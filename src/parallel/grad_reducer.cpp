#include "vescale/parallel/grad_reducer.h"
#include "vescale/plan/parallel_dims.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/timeline/recorder.h"
#include "grad_reducer_state.h"

namespace vescale::parallel {

namespace {

const char* dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "fp32";
    case c10::ScalarType::BFloat16:
      return "bf16";
    case c10::ScalarType::Half:
      return "fp16";
    case c10::ScalarType::Double:
      return "fp64";
    default:
      return c10::toString(t);
  }
}

}  // namespace

std::vector<std::string> GradReducer::State::dim_names(const std::vector<int64_t>& dims) const {
  std::vector<std::string> n;
  for (int64_t d : dims) n.push_back(mesh.dim_names()[d]);
  return n;
}

dist::ProcessGroup& GradReducer::State::first_group(const Bucket& b) const {
  return options.fused ? mesh.group_over(dim_names(b.dims))
                       : mesh.group(mesh.dim_names()[b.dims[0]]);
}

c10::ScalarType GradReducer::State::wire_dtype(const Bucket& b) const {
  return options.reduce_bf16 && b.dtype == c10::ScalarType::Float ? c10::ScalarType::BFloat16
                                                                  : b.dtype;
}

void GradReducer::State::count(const at::Tensor& flat) {
  ++current.collectives;
  current.bytes += flat.numel() * static_cast<int64_t>(flat.element_size());
}

namespace {

// Runs after AccumulateGrad has added this backward's gradient into p.grad().
struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  std::weak_ptr<GradReducer::State> state;
  size_t index;
  ReadyHook(std::weak_ptr<GradReducer::State> s, size_t i) : state(std::move(s)), index(i) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override {
    if (auto s = state.lock()) s->on_grad(index);
  }
};

}  // namespace

void GradReducer::State::on_grad(size_t i) {
  std::lock_guard<std::mutex> lock(mu);
  if (!sync || !layout_built || !options.overlap) return;  // accumulate only / reduce in finish()
  ReducerParam& p = params[i];
  if (p.bucket < 0) return;
  Bucket& b = buckets[p.bucket];
  VESCALE_CHECK(
      !b.launched, "GradReducer: parameter '", p.name,
      "' got a second gradient after its bucket was ",
      "launched in this backward; call finish() after each synced backward, and run the earlier ",
      "micro-batches under NoSync");
  if (!p.ready) p.ready = true, --b.pending;
  if (b.pending == 0) launch_ready(b.sequence);
}

// Buckets sharing a group launch in bucket order on every rank, so their collectives match up
// even if gradients were ready in another order.
void GradReducer::State::launch_ready(const std::string& sequence) {
  size_t& next = next_launch[sequence];
  while (next < buckets.size()) {
    Bucket& b = buckets[next];
    if (b.sequence != sequence || b.launched) {
      ++next;
      continue;
    }
    if (b.pending > 0) break;
    launch(b, /*in_backward=*/true);
    ++next;
  }
}

void GradReducer::State::launch(Bucket& b, bool in_backward) {
  at::NoGradGuard no_grad;
  const auto& first = params[b.params.front()].tensor;
  const at::Device device = dtensor::to_local(first.detach()).device();
  const int64_t size = options.zero >= 1 ? b.padded : b.numel;
  b.flat = at::empty({size}, at::TensorOptions().dtype(wire_dtype(b)).device(device));
  if (size > b.numel) b.flat.narrow(0, b.numel, size - b.numel).zero_();
  for (size_t i : b.params) {
    ReducerParam& p = params[i];
    at::Tensor slot = b.flat.narrow(0, p.offset, p.numel);
    at::Tensor& g = p.tensor.mutable_grad();
    if (!g.defined()) {  // not used on this rank this step: contributes nothing
      slot.zero_();
      continue;
    }
    if (options.zero >= 3 && dtensor::is_dtensor(g) &&
        dtensor::spec_of(g).placements != p.grad_placements) {
      // The static layout expects Partial over the bucket's dims and the parameter's placements
      // elsewhere; anything else (Partial over tp for sequence-parallel norms, a transposed
      // shard) is brought there first, one collective for this gradient.
      g = dtensor::redistribute(g.detach(), p.grad_placements);
      ++current.fallbacks;
      count(dtensor::to_local(g));
    }
    VESCALE_CHECK(dtensor::is_dtensor(g) && dtensor::spec_of(g).placements == p.grad_placements,
                  "GradReducer: the gradient of '", p.name, "' arrived as ",
                  dtensor::is_dtensor(g) ? dtensor::to_string(dtensor::spec_of(g).placements)
                                         : "a plain tensor",
                  " but its bucket was built for ", dtensor::to_string(p.grad_placements),
                  "; the graph changed after the first step; build a new GradReducer");
    slot.copy_(dtensor::to_local(g).reshape({-1}));
    g = at::Tensor();  // the bucket holds it now; finish() hands back the reduced one
  }
  dist::ProcessGroup& group = first_group(b);
  static const uint32_t kBucket = timeline::intern("grad bucket");
  timeline::CommContext context(kBucket, static_cast<int32_t>(&b - buckets.data()));
  if (options.zero >= 2) {  // each rank receives only the slice it owns
    // A reduce-scatter holds a full-size buffer (Gloo: an all-reduce of a copy) until it is
    // waited on: at most two in flight, so the full gradients never all exist at once.
    while (inflight.size() >= 2) {
      Bucket& oldest = buckets[inflight.front()];
      oldest.work.wait();
      oldest.work = dist::Work();
      inflight.pop_front();
    }
    inflight.push_back(static_cast<size_t>(&b - buckets.data()));
    b.grad_shard = at::empty({b.chunk}, b.flat.options());
    b.work = group.reduce_scatter(b.grad_shard, b.flat, b.op);
    count(b.flat);
    b.flat = at::Tensor();  // the collective keeps what it still needs
  } else {
    b.work = group.all_reduce(b.flat, b.op);
    count(b.flat);
  }
  b.launched = true;
  current.overlapped += in_backward ? 1 : 0;
  if (on_bucket_sent) on_bucket_sent(static_cast<size_t>(&b - buckets.data()));
}

void GradReducer::State::place(
    size_t k, c10::ScalarType dtype, const std::vector<int64_t>& dims, dist::ReduceOp op,
    std::map<std::tuple<c10::ScalarType, std::vector<int64_t>, dist::ReduceOp, int64_t>, int64_t>&
        open) {
  ReducerParam& p = params[k];
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(options.bucket_mb * 1024 * 1024));
  const int64_t numel = p.numel, elem = static_cast<int64_t>(c10::elementSize(dtype));
  const auto key = std::make_tuple(dtype, dims, op, p.unit);
  auto it = open.find(key);
  if (it == open.end() ||
      (buckets[it->second].numel > 0 && (buckets[it->second].numel + numel) * elem > cap)) {
    Bucket b;
    b.dtype = dtype;
    b.dims = dims;
    b.op = op;
    b.unit = p.unit;
    b.sequence = first_group(b).name();
    buckets.push_back(std::move(b));
    open[key] = static_cast<int64_t>(buckets.size()) - 1;
    it = open.find(key);
  }
  Bucket& b = buckets[it->second];
  p.bucket = it->second;
  p.offset = b.numel;
  b.params.push_back(k);
  b.numel += numel;
  ++b.pending;
}

void GradReducer::State::build_layout() {
  // Each parameter's reduction, read off its first gradient: the mesh dims where the gradient
  // is Partial and the parameter Replicate. Anything else that differs goes to the fallback.
  std::map<std::tuple<c10::ScalarType, std::vector<int64_t>, dist::ReduceOp, int64_t>, int64_t>
      open;
  int64_t last_unit = -1;
  for (size_t k = params.size(); k-- > 0;) {  // reverse registration order ~ reverse order of use
    ReducerParam& p = params[k];
    // A new unit closes the open buckets: one left open would hold back every later bucket
    // (they launch in order) until its last gradient, e.g. the embedding's, at the very end.
    if (p.unit != last_unit) open.clear(), last_unit = p.unit;
    const at::Tensor& g = p.tensor.grad();
    if (!g.defined() || !dtensor::is_dtensor(g)) continue;
    const auto& want = dtensor::spec_of(p.tensor).placements;
    const auto& got = dtensor::spec_of(g).placements;
    if (got == want) continue;
    std::vector<int64_t> dims;
    bool bucketable = true;
    dist::ReduceOp op = dist::ReduceOp::Sum;
    // After the all-reduce the Partial dims are Replicate; a Shard the parameter has there (or
    // on a dim the gradient is Replicate) is then a local slice, no communication.
    dtensor::Placements reduced = got;
    for (size_t d = 0; d < got.size(); ++d) {
      if (got[d] == want[d]) continue;
      if (got[d].is_partial() && !want[d].is_partial() && (dims.empty() || got[d].reduce == op)) {
        op = got[d].reduce;
        dims.push_back(static_cast<int64_t>(d));
        reduced[d] = dtensor::Replicate();
      } else if (!(got[d].is_replicate() && want[d].is_shard())) {
        bucketable = false;
        break;
      }
    }
    if (dims.empty()) bucketable = false;
    // ZeRO steps a slice of the bucket as the parameter's values: no local slicing afterwards.
    if (options.zero >= 1 && reduced != want) bucketable = false;
    if (!bucketable) {
      fallback_notes += "fallback: " + p.name + " grad " + dtensor::to_string(got) + " -> " +
                        dtensor::to_string(want) + "\n";
      continue;
    }
    const at::Tensor local = dtensor::to_local(g.detach());
    p.numel = local.numel();
    p.local_shape = local.sizes().vec();
    p.grad_placements = got;
    p.reduced_placements = reduced;
    place(k, local.scalar_type(), dims, op, open);
  }
  slice_buckets();
  layout_built = true;
}

void GradReducer::State::build_static_layout() {
  // The reduction dims: the options', else data parallelism's.
  std::vector<int64_t> dims;
  const auto& names = mesh.dim_names();
  const std::vector<std::string> want_dims =
      options.dims.empty() ? std::vector<std::string>{plan::kDataDim} : options.dims;
  for (const auto& n : want_dims) {
    auto it = std::find(names.begin(), names.end(), n);
    VESCALE_CHECK(
        it != names.end(), "GradReducer: ZeRO-3 reduces over mesh dim '", n,
        "', which the mesh lacks; set grad_reduce.dims in the plan to its data-parallel dims");
    dims.push_back(it - names.begin());
  }
  std::sort(dims.begin(), dims.end());
  std::map<std::tuple<c10::ScalarType, std::vector<int64_t>, dist::ReduceOp, int64_t>, int64_t>
      open;
  int64_t last_unit = -1;
  for (size_t k = params.size(); k-- > 0;) {
    ReducerParam& p = params[k];
    if (p.unit != last_unit) open.clear(), last_unit = p.unit;
    const auto& want = dtensor::spec_of(p.tensor).placements;
    bool replicated = true;
    for (int64_t d : dims) replicated = replicated && want[d].is_replicate();
    if (!replicated) {  // already sharded over the data-parallel dims: nothing to slice
      fallback_notes += "not sliced: " + p.name + " is " + dtensor::to_string(want) + "\n";
      continue;
    }
    const at::Tensor local = dtensor::to_local(p.tensor.detach());
    p.numel = local.numel();
    p.local_shape = local.sizes().vec();
    p.reduced_placements = want;
    p.grad_placements = want;
    for (int64_t d : dims) p.grad_placements[d] = dtensor::Placement::partial();
    place(k, local.scalar_type(), dims, dist::ReduceOp::Sum, open);
  }
  slice_buckets();
  layout_built = true;
}

void GradReducer::State::slice_buckets() {
  if (options.zero < 1) return;
  for (auto& b : buckets) {
    const dist::ProcessGroup& g = first_group(b);
    b.chunk = (b.numel + g.size() - 1) / g.size();
    b.padded = b.chunk * g.size();
    b.shard_rank = g.rank();
    const int64_t lo = b.shard_rank * b.chunk, hi = lo + b.chunk;
    for (size_t i : b.params) {
      const ReducerParam& p = params[i];
      const int64_t s = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (s < e) b.segments.push_back({i, s - p.offset, s - lo, e - s});
    }
  }
}

GradReducer::GradReducer(torch::nn::Module& model, const mesh::DeviceMesh& mesh,
                         GradReducerOptions options)
    : state_(std::make_shared<State>()) {
  VESCALE_CHECK(options.bucket_mb > 0, "GradReducer: bucket_mb=", options.bucket_mb,
                " must be positive (grad_reduce.bucket_mb in the plan)");
  VESCALE_CHECK(options.zero >= 0 && options.zero <= 3, "GradReducer: zero=", options.zero,
                " must be 0, 1, 2 or 3");
  state_->mesh = mesh;
  state_->options = options;
  std::vector<std::string> unit_names;
  if (!options.unit_pattern.empty()) {
    // The outermost matching modules ("layers.*" also matches layers.0.attention.wq; the
    // unit is layers.0). named_modules lists parents before their children.
    auto inside_unit = [&](const std::string& name) {
      for (const auto& u : unit_names)
        if (name.rfind(u, 0) == 0) return true;
      return false;
    };
    for (const auto& m : model.named_modules("", /*include_self=*/false))
      if (!inside_unit(m.key()) && plan::fqn_match(options.unit_pattern, m.key())) {
        unit_names.push_back(m.key() + ".");
        state_->unit_modules.push_back(m.value());
      }
    VESCALE_CHECK(!unit_names.empty(), "GradReducer: unit_pattern '", options.unit_pattern,
                  "' matches no module of the model; use a pattern such as \"layers.*\"");
  }
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!dtensor::is_dtensor(item.value()) || !item.value().requires_grad()) continue;
    ReducerParam p;
    p.name = item.key();
    p.tensor = item.value();
    // The innermost matching unit (the longest prefix).
    size_t best = 0;
    for (size_t u = 0; u < unit_names.size(); ++u)
      if (p.name.rfind(unit_names[u], 0) == 0 &&
          (best == 0 || unit_names[u].size() > unit_names[best - 1].size()))
        best = u + 1;
    p.unit = static_cast<int64_t>(best);
    state_->params.push_back(std::move(p));
  }
  if (options.zero >= 3) state_->build_static_layout();
  for (size_t i = 0; i < state_->params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(state_->params[i].tensor,
                                                   std::make_unique<ReadyHook>(state_, i));
}

GradReducer::~GradReducer() {
  for (auto& p : state_->params) torch::autograd::impl::set_post_acc_grad_hooks(p.tensor, nullptr);
}

void GradReducer::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sync = sync;
}

bool GradReducer::sync() const { return state_->sync; }

ReduceStats GradReducer::finish() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  VESCALE_CHECK(
      s.sync,
      "GradReducer::finish: called under NoSync; leave the NoSync scope for the last micro-batch");
  at::NoGradGuard no_grad;
  if (!s.layout_built) s.build_layout();
  // What backward didn't launch (no overlap, the first step, unused params), in bucket order.
  for (auto& b : s.buckets)
    if (!b.launched) {
      b.pending = 0;
      s.launch(b, /*in_backward=*/false);
    }
  for (auto& b : s.buckets) b.work.wait();
  if (!s.options.fused) {  // the other dims, one collective each (ZeRO 2+: on the slice only)
    for (size_t k = 1;; ++k) {
      bool any = false;
      for (auto& b : s.buckets)
        if (k < b.dims.size()) {
          any = true;
          at::Tensor& t = s.options.zero >= 2 ? b.grad_shard : b.flat;
          b.work = s.mesh.group(s.mesh.dim_names()[b.dims[k]]).all_reduce(t, b.op);
          s.count(t);
        }
      if (!any) break;
      for (auto& b : s.buckets)
        if (k < b.dims.size()) b.work.wait();
    }
  }
  for (auto& b : s.buckets) {
    if (s.options.zero >= 1) {
      // The optimizer (ZeroOptimizer) reads this rank's slice; the parameters get no grad.
      if (s.options.zero == 1)
        b.grad_shard = b.flat.narrow(0, b.shard_rank * b.chunk, b.chunk).clone();
      b.grad_shard = b.grad_shard.to(b.dtype);
    } else {
      const at::Tensor flat = b.flat.to(b.dtype);  // back from a bf16 wire
      for (size_t i : b.params) {
        ReducerParam& p = s.params[i];
        const auto& spec = dtensor::spec_of(p.tensor);
        // A view of the bucket: the step's flat buffer lives until the grads are dropped.
        at::Tensor g = dtensor::from_local(flat.narrow(0, p.offset, p.numel).view(p.local_shape),
                                           s.mesh, p.reduced_placements, spec.shape);
        if (p.reduced_placements != spec.placements)
          g = dtensor::redistribute(g, spec.placements);  // local slices
        p.tensor.mutable_grad() = g;
      }
    }
    for (size_t i : b.params) s.params[i].ready = false;
    b.pending = static_cast<int64_t>(b.params.size());
    b.launched = false;
    b.flat = at::Tensor();
    b.work = dist::Work();
    ++s.current.buckets;
  }
  s.next_launch.clear();
  s.inflight.clear();
  // Gradients outside the buckets that still differ from their parameter: one by one.
  for (auto& p : s.params) {
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

const ReduceStats& GradReducer::last_step() const { return state_->last; }
const ReduceStats& GradReducer::total() const { return state_->total; }
int64_t GradReducer::num_buckets() const { return static_cast<int64_t>(state_->buckets.size()); }
int64_t GradReducer::num_units() const { return static_cast<int64_t>(state_->unit_modules.size()); }

std::string GradReducer::describe() const {
  const State& s = *state_;
  std::string out;
  for (size_t i = 0; i < s.buckets.size(); ++i) {
    const Bucket& b = s.buckets[i];
    std::string dims;
    for (int64_t d : b.dims) dims += (dims.empty() ? "" : ",") + s.mesh.dim_names()[d];
    char line[256];
    std::snprintf(line, sizeof line, "bucket %zu: %s over %s%s, %zu params, %.2f MiB\n", i,
                  dtype_name(b.dtype), dims.c_str(),
                  b.dims.size() > 1 ? (s.options.fused ? " (fused)" : " (one per dim)") : "",
                  b.params.size(),
                  static_cast<double>(b.numel * c10::elementSize(b.dtype)) / (1024.0 * 1024.0));
    out += line;
    if (s.options.zero >= 1) {
      std::snprintf(line, sizeof line,
                    "  zero %d: this rank owns elements [%lld, %lld) of %lld (%zu segments)\n",
                    s.options.zero, static_cast<long long>(b.shard_rank * b.chunk),
                    static_cast<long long>((b.shard_rank + 1) * b.chunk),
                    static_cast<long long>(b.padded), b.segments.size());
      out += line;
    }
  }
  return out + s.fallback_notes;
}

}  // namespace vescale::parallel
