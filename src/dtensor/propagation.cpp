#include "dtensor/propagation.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dtensor/call_plan.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {
std::unordered_map<std::string, RegisteredRule>& registry() {
  static std::unordered_map<std::string, RegisteredRule> r;
  return r;
}

std::atomic<int> g_replicate_fallback{-1};  // -1: read the env once

bool replicate_fallback_on() {
  int v = g_replicate_fallback.load();
  if (v < 0) {
    const char* e = std::getenv("VESCALE_DTENSOR_REPLICATE_FALLBACK");
    v = (e && std::strcmp(e, "1") == 0) ? 1 : 0;
    g_replicate_fallback = v;
  }
  return v == 1;
}

// Output global shapes and dtypes: run the op on meta tensors of the global shapes.
std::vector<std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>>> meta_outputs(
    const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
    const std::vector<DTensorSpec>& specs) {
  std::vector<c10::IValue> meta(args.begin(), args.end());
  size_t k = 0;
  map_args(meta, c10::Device(c10::kMeta), [&](size_t, int64_t, const at::Tensor&) {
    const auto& s = specs[k++];
    return at::empty(s.shape, at::TensorOptions().dtype(s.dtype).device(c10::kMeta));
  });
  torch::jit::Stack stack(meta.begin(), meta.end());
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.callBoxed(stack);
  }
  std::vector<std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>>> out;
  for (auto& r : stack) {
    std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>> elems;
    if (r.isTensor()) {
      elems.emplace_back(r.toTensor().sizes().vec(), r.toTensor().scalar_type());
    } else if (r.isTensorList()) {
      for (const at::Tensor& t : r.toTensorList())
        elems.emplace_back(t.sizes().vec(), t.scalar_type());
    }
    if (r.isTensor() || r.isTensorList()) out.push_back(std::move(elems));
  }
  return out;
}
}  // namespace

const c10::IValue& OpCall::arg(const char* n) const {
  const auto& a = op.schema().arguments();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name() == n) return args[i];
  VESCALE_FAIL("DTensor rule for ", name, ": the op has no argument '", n, "'");
}

bool OpCall::has_arg(const char* n) const {
  for (const auto& a : op.schema().arguments())
    if (a.name() == n) return true;
  return false;
}

int64_t OpCall::spec_index(size_t arg_index) const {
  for (size_t i = 0; i < spec_arg.size(); ++i)
    if (spec_arg[i] == arg_index) return static_cast<int64_t>(i);
  return -1;
}

bool OpCall::is_inplace() const {
  const auto& a = op.schema().arguments();
  return !a.empty() && a[0].alias_info() && a[0].alias_info()->isWrite();
}

size_t tensor_return_count(const c10::FunctionSchema& schema) {
  size_t n = 0;
  for (auto& r : schema.returns()) {
    auto k = r.type()->kind();
    if (k == c10::TypeKind::TensorType ||
        (k == c10::TypeKind::ListType &&
         r.type()->containedType(0)->kind() == c10::TypeKind::TensorType))
      ++n;
  }
  return n;
}

size_t OpCall::n_outputs() const { return tensor_return_count(op.schema()); }

void register_rule(const std::string& name, Rule rule, RuleOptions options) {
  registry()[name] = {std::move(rule), options};
}

const RegisteredRule* find_rule(const c10::OperatorHandle& op, const std::string& name) {
  auto& r = registry();
  if (auto it = r.find(name); it != r.end()) return &it->second;
  const std::string base = op.schema().name();
  if (auto it = r.find(base); it != r.end()) return &it->second;
  // Pointwise by tag; in-place variants (masked_fill_) are often untagged, so ask the
  // functional op (masked_fill) instead.
  bool pointwise = op.hasTag(at::Tag::pointwise);
  if (!pointwise && !base.empty() && base.back() == '_') {
    auto functional = c10::Dispatcher::singleton().findOp(
        c10::OperatorName(base.substr(0, base.size() - 1), op.schema().overload_name()));
    pointwise = functional && functional->hasTag(at::Tag::pointwise);
  }
  if (pointwise) {
    if (auto it = r.find("@pointwise"); it != r.end()) return &it->second;
  }
  return nullptr;
}

Placements replicate_all(int64_t mesh_ndim) {
  return Placements(mesh_ndim, Placement::replicate());
}

Placements shards_below(const DTensorSpec& x, int64_t from_dim) {
  Placements p = x.placements;
  for (auto& q : p)
    if (q.is_partial() || (q.is_shard() && q.dim >= from_dim)) q = Placement::replicate();
  return p;
}

Placements partial_where_sharded(const Placements& p) {
  Placements out(p.size(), Placement::replicate());
  for (size_t m = 0; m < p.size(); ++m)
    if (p[m].is_shard()) out[m] = Placement::partial();
  return out;
}

Strategy all_replicate(const OpCall& call, size_t n_outputs) {
  Strategy s;
  s.inputs.assign(call.specs.size(), replicate_all(call.mesh_ndim()));
  s.outputs.assign(n_outputs, replicate_all(call.mesh_ndim()));
  return s;
}

void set_replicate_fallback(bool on) { g_replicate_fallback = on ? 1 : 0; }

std::shared_ptr<const CallPlan> propagate(const c10::OperatorHandle& op, const std::string& name,
                                          c10::ArrayRef<c10::IValue> args,
                                          const std::vector<DTensorSpec>& specs,
                                          const std::vector<size_t>& spec_arg,
                                          const mesh::DeviceMesh& mesh) {
  const auto& schema = op.schema();
  const size_t n_out = tensor_return_count(schema);
  const int64_t nm = mesh.ndim();
  bool all_replicated = true;
  for (auto& s : specs) all_replicated &= s.is_replicated();
  // Random ops always take their rule (src/random/dtensor_rules.cpp): replicated or not,
  // every element must come from the consistent stream.
  const bool random = op.hasTag(at::Tag::nondeterministic_seeded);
  const RegisteredRule* rule = find_rule(op, name);
  VESCALE_CHECK(!random || rule, "DTensor: ", name,
                " draws random numbers, and the consistent RNG "
                "(vescale/random) has no rule for it yet; use vescale::random functions");
  // Some rules run even on replicated inputs (RuleOptions::even_when_replicated: views,
  // permutations, ops whose local_fn is the computation).
  const bool always_rule = rule && rule->options.even_when_replicated;
  Strategy strategy;
  if (all_replicated && !always_rule && !random) {
    // Bypass: a deterministic op on replicated inputs gives replicated outputs, no rule needed.
    strategy.inputs.assign(specs.size(), replicate_all(nm));
    strategy.outputs.assign(n_out, replicate_all(nm));
    ++counters().bypasses;
  } else if (rule) {
    OpCall call{op, name, specs, spec_arg, args};
    strategy = rule->rule(call);
  } else {
    VESCALE_CHECK(replicate_fallback_on(), "DTensor: no sharding rule for ", name, " with inputs ",
                  describe_inputs(specs),
                  ". Add a rule in src/dtensor/rules, redistribute the inputs to "
                  "Replicate first, or set VESCALE_DTENSOR_REPLICATE_FALLBACK=1 to gather them "
                  "automatically");
    static std::mutex mu;
    static std::set<std::string> warned;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (warned.insert(name).second)
        log::warn("DTensor: no sharding rule for " + name +
                  "; gathering its inputs to Replicate (slow)");
    }
    strategy.inputs.assign(specs.size(), replicate_all(nm));
    strategy.outputs.assign(n_out, replicate_all(nm));
  }
  VESCALE_CHECK(strategy.inputs.size() == specs.size() && strategy.outputs.size() == n_out,
                "DTensor: the rule for ", name, " gave ", strategy.inputs.size(), " input and ",
                strategy.outputs.size(), " output placements for ", specs.size(), " inputs and ",
                n_out, " outputs");

  log::debug("DTensor: " + name + describe_inputs(specs) + (all_replicated ? " bypass" : ""));
  auto plan = std::make_shared<CallPlan>();
  plan->inputs = std::move(strategy.inputs);
  plan->output_placements = strategy.outputs;
  plan->local_fn = std::move(strategy.local_fn);
  plan->dims_from = std::move(strategy.dims_from);
  if (n_out == 0) return plan;
  if (!strategy.element_outputs.empty()) {
    std::vector<std::shared_ptr<const DTensorSpec>> elems;
    for (size_t j = 0; j < strategy.element_outputs.size(); ++j)
      elems.push_back(std::make_shared<const DTensorSpec>(
          DTensorSpec{mesh, strategy.element_outputs[j], strategy.element_shapes[j],
                      c10::ScalarType::Undefined}));
    plan->outputs.push_back(std::move(elems));
    return plan;
  }
  // Global shapes: from the rule, else from a meta run of the op on the global shapes.
  std::vector<std::vector<std::pair<std::vector<int64_t>, c10::ScalarType>>> shapes;
  if (!strategy.output_shapes.empty()) {
    VESCALE_CHECK(strategy.output_shapes.size() == n_out, "DTensor: the rule for ", name, " gave ",
                  strategy.output_shapes.size(), " output shapes for ", n_out, " outputs");
    for (auto& sh : strategy.output_shapes) shapes.push_back({{sh, c10::ScalarType::Undefined}});
  } else {
    try {
      shapes = meta_outputs(op, args, specs);
    } catch (const std::exception& e) {
      // No meta kernel (many exist only in Python). Replicate outputs take the local shape.
      bool all_rep = true;
      for (auto& p : plan->output_placements)
        for (auto& x : p) all_rep &= x.is_replicate();
      VESCALE_CHECK(all_rep, "DTensor: cannot infer the global output shape of ", name,
                    " (no meta kernel: ", e.what(), "); its rule must give output_shapes");
      return plan;
    }
  }
  VESCALE_CHECK(shapes.size() == n_out, "DTensor: ", name, ": meta run gave ", shapes.size(),
                " outputs, not ", n_out);
  for (size_t r = 0; r < n_out; ++r) {
    std::vector<std::shared_ptr<const DTensorSpec>> elems;
    for (auto& [shape, dtype] : shapes[r]) {
      DTensorSpec s{mesh, strategy.outputs[r], shape, dtype};
      s.validate_and_normalize();
      elems.push_back(std::make_shared<const DTensorSpec>(std::move(s)));
    }
    plan->outputs.push_back(std::move(elems));
  }
  return plan;
}

// The spec of output (r, j): cached by the plan; else built from the local result.
std::shared_ptr<const DTensorSpec> output_spec(const CallPlan& plan, const mesh::DeviceMesh& mesh,
                                               size_t r, size_t j, const at::Tensor& local) {
  if (!plan.outputs.empty()) {
    auto& elems = plan.outputs[r];
    VESCALE_CHECK(j < elems.size(), "DTensor: an op returned more tensors than its meta run");
    auto& s = elems[j];
    if (s->dtype == local.scalar_type()) return s;
    DTensorSpec copy = *s;  // the rule gave the shape only
    copy.dtype = local.scalar_type();
    auto resolved = std::make_shared<const DTensorSpec>(std::move(copy));
    if (s->dtype == c10::ScalarType::Undefined) s = resolved;
    return resolved;
  }
  return std::make_shared<const DTensorSpec>(
      DTensorSpec{mesh, plan.output_placements[r], local.sizes().vec(), local.scalar_type()});
}

}  // namespace vescale::dtensor
