#include "vescale/parallel/grad_layout.h"

#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/plan/plan.h"

namespace vescale::parallel {

GradLayoutOptions GradLayoutOptions::from_plan(const plan::GradReduce& g) {
  GradLayoutOptions o;
  o.bucket_mb = g.bucket_mb;
  o.fused = g.fused;
  o.dims = g.dims;
  return o;
}

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

std::string parent_of(const std::string& fqn) {
  const auto dot = fqn.rfind('.');
  return dot == std::string::npos ? "" : fqn.substr(0, dot);
}

bool under(const std::string& fqn, const std::string& module) {
  return module.empty() || fqn.rfind(module + ".", 0) == 0;
}

// The mesh dims (by index) each parameter's gradient comes out Partial on, besides the
// reduction dims: sequence-parallel inputs and sharded experts (see the header).
class PartialDims {
 public:
  PartialDims(torch::nn::Module& model, const plan::Plan& plan, size_t ndim) : plan_(plan) {
    // Each MoE layer: its experts module and the dims their weights are sharded on.
    for (const auto& m : model.named_modules("", /*include_self=*/false)) {
      if (!plan.moe_for(m.key())) continue;
      std::set<int64_t> sharded;
      for (const auto& p : m.value()->named_parameters(/*recurse=*/true)) {
        if (!dtensor::is_dtensor(p.value())) continue;
        const auto& pl = dtensor::spec_of(p.value()).placements;
        for (size_t d = 0; d < pl.size() && d < ndim; ++d)
          if (pl[d].is_shard()) sharded.insert(static_cast<int64_t>(d));
      }
      experts_.push_back({m.key(), std::move(sharded)});
    }
  }

  bool partial(const std::string& fqn, size_t d) const {
    // A module fed token shards on d (its batch or sequence dim) applies its own weights to
    // every shard: each rank's gradient is a partial sum.
    if (const plan::ForwardSpec* f = plan_.forward_for(parent_of(fqn)))
      if (!f->input.empty() && d < f->input[0].size() && f->input[0][d].is_shard() &&
          f->input[0][d].dim <= 1)
        return true;
    // The router of a MoE layer whose experts are sharded on d: the experts' outputs, and with
    // them the routing weights' gradients, are Partial there until the layer's all-reduce.
    for (const auto& [experts, sharded] : experts_)
      if (sharded.count(static_cast<int64_t>(d)) && under(fqn, parent_of(experts)) &&
          !under(fqn, experts))
        return true;
    return false;
  }

 private:
  const plan::Plan& plan_;
  std::vector<std::pair<std::string, std::set<int64_t>>> experts_;
};

using BucketKey = std::tuple<c10::ScalarType, std::vector<int64_t>, dist::ReduceOp, int64_t>;

}  // namespace

GradLayout::GradLayout(torch::nn::Module& model, const mesh::DeviceMesh& mesh,
                       const plan::Plan& plan, GradLayoutOptions options)
    : mesh_(mesh), options_(std::move(options)) {
  VESCALE_CHECK(options_.bucket_mb > 0, "gradient layout: bucket_mb=", options_.bucket_mb,
                " must be positive (grad_reduce.bucket_mb in the plan)");
  VESCALE_CHECK(options_.zero >= 0 && options_.zero <= 3, "gradient layout: zero=",
                options_.zero, " must be 0, 1, 2 or 3");
  // The reduction dims.
  const auto& names = mesh_.dim_names();
  std::vector<std::string> dims = options_.dims.empty() ? plan.grad_reduce().dims : options_.dims;
  if (dims.empty()) {
    std::vector<std::pair<std::string, int64_t>> shape;
    for (int64_t i = 0; i < mesh_.ndim(); ++i) shape.emplace_back(names[i], mesh_.size(names[i]));
    dims = plan::ParallelDims(shape, &plan).data;
  }
  std::vector<bool> reduce(names.size(), false);
  for (const auto& n : dims) {
    auto it = std::find(names.begin(), names.end(), n);
    if (it == names.end()) {
      std::string have;
      for (const auto& m : names) have += (have.empty() ? "" : ", ") + m;
      VESCALE_FAIL("gradient layout: the plan reduces gradients over mesh dim '", n,
                   "', which the mesh lacks (its dims: ", have,
                   "); set grad_reduce.dims in the plan to the data-parallel dims of the mesh");
    }
    reduce[it - names.begin()] = true;
  }

  // ZeRO-3's units: the outermost matching modules ("layers.*" also matches
  // layers.0.attention.wq; the unit is layers.0). named_modules lists parents first.
  std::vector<std::string> unit_names;
  if (!options_.unit_pattern.empty()) {
    auto inside_unit = [&](const std::string& name) {
      for (const auto& u : unit_names)
        if (name.rfind(u, 0) == 0) return true;
      return false;
    };
    for (const auto& m : model.named_modules("", /*include_self=*/false))
      if (!inside_unit(m.key()) && plan::fqn_match(options_.unit_pattern, m.key())) {
        unit_names.push_back(m.key() + ".");
        unit_modules_.push_back(m.value());
      }
    VESCALE_CHECK(!unit_names.empty(), "gradient layout: unit_pattern '", options_.unit_pattern,
                  "' matches no module of the model; use a pattern such as \"layers.*\"");
  }

  const PartialDims partial(model, plan, names.size());
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!dtensor::is_dtensor(item.value()) || !item.value().requires_grad()) continue;
    LayoutParam p;
    p.name = item.key();
    p.tensor = item.value();
    // The innermost matching unit (the longest prefix).
    size_t best = 0;
    for (size_t u = 0; u < unit_names.size(); ++u)
      if (p.name.rfind(unit_names[u], 0) == 0 &&
          (best == 0 || unit_names[u].size() > unit_names[best - 1].size()))
        best = u + 1;
    p.unit = static_cast<int64_t>(best);
    const auto& want = dtensor::spec_of(p.tensor).placements;
    p.grad_placements = want;
    for (size_t d = 0; d < want.size(); ++d)
      if (want[d].is_replicate() && (reduce[d] || partial.partial(p.name, d)))
        p.grad_placements[d] = dtensor::Placement::partial();
    const at::Tensor local = dtensor::to_local(p.tensor.detach());
    p.numel = local.numel();
    p.local_shape = local.sizes().vec();
    params_.push_back(std::move(p));
  }
  place_buckets();
  slice_buckets();
}

void GradLayout::place_buckets() {
  const int64_t cap =
      std::max<int64_t>(1, static_cast<int64_t>(options_.bucket_mb * 1024 * 1024));
  std::map<BucketKey, int64_t> open;
  int64_t last_unit = -1;
  for (size_t k = params_.size(); k-- > 0;) {  // reverse registration order ~ order of backward
    LayoutParam& p = params_[k];
    // A new unit closes the open buckets: one left open would hold back every later bucket
    // (they launch in order) until its last gradient, e.g. the embedding's, at the very end.
    if (p.unit != last_unit) open.clear(), last_unit = p.unit;
    std::vector<int64_t> dims;
    for (size_t d = 0; d < p.grad_placements.size(); ++d)
      if (p.grad_placements[d].is_partial()) dims.push_back(static_cast<int64_t>(d));
    if (dims.empty()) {
      notes_ += "not reduced: " + p.name + " is " + dtensor::to_string(p.grad_placements) + "\n";
      continue;
    }
    const c10::ScalarType dtype = dtensor::to_local(p.tensor.detach()).scalar_type();
    const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
    const BucketKey key{dtype, dims, dist::ReduceOp::Sum, p.unit};
    auto it = open.find(key);
    if (it == open.end() ||
        (buckets_[it->second].numel > 0 && (buckets_[it->second].numel + p.numel) * elem > cap)) {
      LayoutBucket b;
      b.dtype = dtype;
      b.dims = dims;
      b.unit = p.unit;
      buckets_.push_back(std::move(b));
      it = open.insert_or_assign(key, static_cast<int64_t>(buckets_.size()) - 1).first;
    }
    LayoutBucket& b = buckets_[it->second];
    p.bucket = it->second;
    p.offset = b.numel;
    b.params.push_back(k);
    b.numel += p.numel;
  }
}

void GradLayout::slice_buckets() {
  if (options_.zero < 1) return;
  for (auto& b : buckets_) {
    const dist::ProcessGroup& g = shard_group(b);
    b.chunk = (b.numel + g.size() - 1) / g.size();
    b.padded = b.chunk * g.size();
    b.shard_rank = g.rank();
    const int64_t lo = b.shard_rank * b.chunk, hi = lo + b.chunk;
    for (size_t i : b.params) {
      const LayoutParam& p = params_[i];
      const int64_t s = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (s < e) b.segments.push_back({i, s - p.offset, s - lo, e - s});
    }
  }
}

std::vector<std::string> GradLayout::dim_names(const std::vector<int64_t>& dims) const {
  std::vector<std::string> n;
  for (int64_t d : dims) n.push_back(mesh_.dim_names()[d]);
  return n;
}

dist::ProcessGroup& GradLayout::shard_group(const LayoutBucket& b) const {
  return options_.fused ? mesh_.group_over(dim_names(b.dims))
                        : mesh_.group(mesh_.dim_names()[b.dims[0]]);
}

std::vector<int64_t> GradLayout::norm_dims(const LayoutBucket& b, const LayoutParam& p) const {
  std::set<int64_t> dims;
  if (options_.fused)
    dims.insert(b.dims.begin(), b.dims.end());
  else
    dims.insert(b.dims[0]);
  const auto& placements = dtensor::spec_of(p.tensor).placements;
  for (size_t d = 0; d < placements.size(); ++d)
    if (placements[d].is_shard()) dims.insert(static_cast<int64_t>(d));
  return {dims.begin(), dims.end()};
}

std::string GradLayout::describe() const {
  std::string out;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const LayoutBucket& b = buckets_[i];
    std::string dims;
    for (int64_t d : b.dims) dims += (dims.empty() ? "" : ",") + mesh_.dim_names()[d];
    char line[256];
    std::snprintf(line, sizeof line, "bucket %zu: %s over %s%s, %zu params, %.2f MiB\n", i,
                  dtype_name(b.dtype), dims.c_str(),
                  b.dims.size() > 1 ? (options_.fused ? " (fused)" : " (one per dim)") : "",
                  b.params.size(),
                  static_cast<double>(b.numel * c10::elementSize(b.dtype)) / (1024.0 * 1024.0));
    out += line;
    if (options_.zero >= 1) {
      std::snprintf(line, sizeof line,
                    "  zero %d: this rank owns elements [%lld, %lld) of %lld (%zu segments)\n",
                    options_.zero, static_cast<long long>(b.shard_rank * b.chunk),
                    static_cast<long long>((b.shard_rank + 1) * b.chunk),
                    static_cast<long long>(b.padded), b.segments.size());
      out += line;
    }
  }
  return out + notes_;
}

}  // namespace vescale::parallel
