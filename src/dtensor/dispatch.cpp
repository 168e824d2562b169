// The boxed fallback: propagate shardings (cached), redistribute inputs, run the op on the
// local shards, wrap the outputs (docs/dtensor.md).
#include "dtensor/dispatch.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "dtensor/dtensor_impl.h"
#include "dtensor/propagation.h"
#include "dtensor/redistribute.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

std::atomic<int64_t> g_calls{0}, g_hits{0}, g_bypasses{0}, g_redistributions{0}, g_in_place_sums{0};
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

// What propagation decided for one (op, input specs, arguments) combination.
struct Plan {
  std::vector<Placements> inputs;
  std::vector<Placements> output_placements;  // per tensor return
  // Per tensor return, per element (one for a Tensor, n for a Tensor[]); empty when the
  // shapes come from the local result (Replicate outputs of ops without a meta kernel). A
  // rule that gives shapes leaves the dtype open: the first result fills it in here, so that
  // every later output of this plan shares one spec (no allocation, pointer-equal specs for
  // the cache and the static-eager tape). Plans are per thread, like the caches holding them.
  mutable std::vector<std::vector<std::shared_ptr<const DTensorSpec>>> outputs;
  std::function<void(torch::jit::Stack&)> local_fn;
  std::vector<int64_t> dims_from;  // Strategy::dims_from
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    size_t h = 1469598103934665603ull;
    for (auto v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// Per thread: backward runs on the autograd engine's thread, forward on the caller's.
thread_local std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Plan>, KeyHash> t_cache;

// Static eager (docs/dtensor.md): each thread records the plans of a step's calls in order; later
// steps replay them by position. A replayed call checks only that it is the same op with the
// same input specs (pointer-equal in the steady state) and the same other arguments, then uses
// the recorded plan: no key of the tensor specs, no hashing, no lookup. Any difference falls
// back to eager from that position on and records anew.
struct OpFacts;
struct TapeEntry {
  const c10::FunctionSchema* schema;
  const OpFacts* facts;
  std::vector<std::shared_ptr<const DTensorSpec>> specs;  // per input; null for a plain tensor
  std::vector<int64_t> arg_key;                           // the non-tensor arguments
  std::shared_ptr<const Plan> plan;
};
struct Tape {
  int64_t step = -1;  // the global step this thread's cursor belongs to
  size_t cursor = 0;
  std::vector<TapeEntry> entries;
};
std::atomic<bool> g_static_eager{false};
std::atomic<int64_t> g_step{0};
std::atomic<int64_t> g_replayed{0}, g_recorded{0}, g_diverged{0};
thread_local Tape t_tape;

bool same_spec(const std::shared_ptr<const DTensorSpec>& recorded, const DTensorSpec* now) {
  if (!recorded || !now) return !recorded && !now;
  return recorded.get() == now || *recorded == *now;
}

// Appends a value-identity of a non-tensor argument to the key; false if it can't.
bool key_of(const c10::IValue& v, std::vector<int64_t>& key) {
  auto dbl = [&](double d) {
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    key.push_back(bits);
  };
  key.push_back(static_cast<int64_t>(v.tag));
  if (v.isNone()) return true;
  if (v.isInt()) return key.push_back(v.toInt()), true;
  if (v.isDouble()) return dbl(v.toDouble()), true;
  if (v.isBool()) return key.push_back(v.toBool()), true;
  if (v.isString())
    return key.push_back(static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef()))), true;
  if (v.isDevice())
    return key.push_back(static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index()),
           true;
  if (v.isComplexDouble()) {
    dbl(v.toComplexDouble().real());
    dbl(v.toComplexDouble().imag());
    return true;
  }
  if (v.isIntList()) {
    for (auto x : v.toIntVector()) key.push_back(x);
    key.push_back(-7777);
    return true;
  }
  if (v.isDoubleList()) {
    for (auto x : v.toDoubleVector()) dbl(x);
    key.push_back(-7778);
    return true;
  }
  if (v.isBoolList()) {
    for (bool x : v.toBoolList()) key.push_back(x);
    key.push_back(-7779);
    return true;
  }
  if (v.isList()) {  // e.g. Scalar[]: element by element
    auto l = v.toList();
    for (size_t i = 0; i < l.size(); ++i)
      if (!key_of(l.get(i), key)) return false;
    key.push_back(-7780);
    return true;
  }
  return false;
}

// Scalar and float arguments (alpha, a fill value, a learning-rate factor, eps, dropout p)
// never change how an op with tensor inputs is sharded, and their values change every step in
// optimizers: keyed by value they would fill the cache and defeat static eager. (Factories
// have no tensor input, and arange's Scalar end sets the shape, so they keep them.)
bool sharding_neutral(const c10::Argument& a) {
  auto kind = a.type()->kind();
  if (kind == c10::TypeKind::OptionalType) kind = a.type()->containedType(0)->kind();
  return kind == c10::TypeKind::NumberType || kind == c10::TypeKind::FloatType;
}

// What dispatch reads from an op's schema, once per op and thread: walking the arguments' and
// returns' types on every call costs cache misses between the kernels.
struct OpFacts {
  std::vector<uint8_t> neutral;  // per argument: sharding_neutral
  struct Return {
    bool tensor_like = false;  // Tensor or Tensor[]
    bool written = false;      // aliases an input the op writes into
    int written_arg = -1;      // that input
  };
  std::vector<Return> returns;
  bool returns_written = false;
};

const OpFacts& op_facts(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, OpFacts> facts;
  auto [it, fresh] = facts.try_emplace(&schema);
  if (!fresh) return it->second;
  OpFacts& f = it->second;
  const auto& args = schema.arguments();
  for (const auto& a : args) f.neutral.push_back(sharding_neutral(a));
  for (const auto& r : schema.returns()) {
    OpFacts::Return fr;
    const auto kind = r.type()->kind();
    fr.tensor_like = kind == c10::TypeKind::TensorType ||
                     (kind == c10::TypeKind::ListType &&
                      r.type()->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (const auto* ra = r.alias_info(); ra && ra->isWrite()) {
      fr.written = true;
      f.returns_written = true;
      for (size_t a = 0; a < args.size() && fr.written_arg < 0; ++a) {
        const auto* aa = args[a].alias_info();
        if (aa && aa->isWrite() && aa->beforeSets() == ra->beforeSets())
          fr.written_arg = static_cast<int>(a);
      }
    }
    f.returns.push_back(fr);
  }
  return f;
}

void key_of(const DTensorSpec& s, std::vector<int64_t>& key) {
  key.push_back(reinterpret_cast<int64_t>(s.mesh.id()));
  for (auto& p : s.placements)
    key.push_back(static_cast<int64_t>(p.kind) * 4096 + p.dim * 8 + static_cast<int64_t>(p.reduce));
  key.push_back(static_cast<int64_t>(s.dtype));
  for (auto d : s.shape) key.push_back(d);
  key.push_back(-1);
}

template <typename F>
void for_each_tensor(c10::ArrayRef<c10::IValue> args, F&& f) {
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& v = args[i];
    if (v.isTensor()) {
      if (v.toTensor().defined()) f(i, -1, v.toTensor());
    } else if (v.isTensorList()) {
      auto l = v.toTensorList();
      for (size_t j = 0; j < l.size(); ++j)
        f(i, static_cast<int64_t>(j), static_cast<at::Tensor>(l[j]));
    } else if (v.isList()) {
      auto l = v.toList();
      for (size_t j = 0; j < l.size(); ++j) {
        c10::IValue e = l.get(j);
        if (e.isTensor() && e.toTensor().defined()) f(i, static_cast<int64_t>(j), e.toTensor());
      }
    }
  }
}

// Replaces tensor (i, j) of `args` through `fn`, and dtensor devices by `device`.
template <typename F>
void map_args(std::vector<c10::IValue>& args, const c10::Device& device, F&& fn) {
  for (size_t i = 0; i < args.size(); ++i) {
    auto& v = args[i];
    if (v.isTensor()) {
      if (v.toTensor().defined()) v = fn(i, -1, v.toTensor());
    } else if (v.isTensorList()) {
      auto l = v.toTensorList();
      c10::List<at::Tensor> out;
      for (size_t j = 0; j < l.size(); ++j) out.push_back(fn(i, static_cast<int64_t>(j), l[j]));
      v = out;
    } else if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
      auto l = v.toList();
      c10::List<std::optional<at::Tensor>> out;
      for (size_t j = 0; j < l.size(); ++j) {
        c10::IValue e = l.get(j);
        if (e.isTensor() && e.toTensor().defined())
          out.push_back(fn(i, static_cast<int64_t>(j), e.toTensor()));
        else
          out.push_back(std::nullopt);
      }
      v = out;
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      v = device;
    }
  }
}

std::string describe_inputs(const std::vector<DTensorSpec>& specs) {
  std::string s;
  for (auto& x : specs)
    s += (s.empty() ? "" : ", ") + to_string(x.placements) + c10::str(c10::IntArrayRef(x.shape));
  return "(" + s + ")";
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

std::shared_ptr<const Plan> propagate(const c10::OperatorHandle& op, const std::string& name,
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
  const Rule* rule = find_rule(op, name);
  VESCALE_CHECK(!random || rule, "DTensor: ", name,
                " draws random numbers, and the consistent RNG "
                "(vescale/random) has no rule for it yet; use vescale::random functions");
  // view must go through its rule even when replicated: the shard may be a transposed view
  // that only a reshape can handle (see rules/view.cpp). Permutations too: their rule gives the
  // output's strides (Strategy::dims_from). The fused attention ops have no CPU kernel of their
  // own: their rule's local_fn is the computation (rules/attention.cpp).
  const bool always_rule =
      name == "aten::view" || name == "aten::_unsafe_view" || name == "aten::t" ||
      name == "aten::transpose.int" || name == "aten::permute" ||
      name.rfind("aten::_scaled_dot_product_fused_attention_overrideable", 0) == 0;
  Strategy strategy;
  if (all_replicated && !always_rule && !random) {
    // Bypass: a deterministic op on replicated inputs gives replicated outputs, no rule needed.
    strategy.inputs.assign(specs.size(), replicate_all(nm));
    strategy.outputs.assign(n_out, replicate_all(nm));
    ++g_bypasses;
  } else if (rule) {
    OpCall call{op, name, specs, spec_arg, args};
    strategy = (*rule)(call);
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
  auto plan = std::make_shared<Plan>();
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
std::shared_ptr<const DTensorSpec> output_spec(const Plan& plan, const mesh::DeviceMesh& mesh,
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

}  // namespace

void set_replicate_fallback(bool on) { g_replicate_fallback = on ? 1 : 0; }

void set_static_eager(bool on) {
  g_static_eager = on;
  ++g_step;
}

bool static_eager() { return g_static_eager.load(); }

void static_eager_step() { ++g_step; }

StaticEagerStats static_eager_stats() {
  return {g_replayed.load(), g_recorded.load(), g_diverged.load()};
}

DispatchStats dispatch_stats() {
  return {g_calls.load(), g_hits.load(), g_bypasses.load(), g_redistributions.load(),
          g_in_place_sums.load()};
}

void count_in_place_sum() { g_in_place_sums.fetch_add(1, std::memory_order_relaxed); }

void clear_propagation_cache() { t_cache.clear(); }

void reset_dispatch_stats() {
  g_calls = 0;
  g_hits = 0;
  g_bypasses = 0;
  g_redistributions = 0;
  g_in_place_sums = 0;
}

void dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  ++g_calls;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - nargs),
                                std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, nargs);

  // 1. The inputs: DTensors with their specs; plain tensors count as Replicate. The hot path
  //    only reads the specs in place; copies are made on a cache miss.
  struct Input {
    at::Tensor tensor;        // held: a Tensor[] element is a temporary
    const DTensorSpec* spec;  // null for a plain tensor; lives in the impl, which `tensor` holds
    size_t arg;
  };
  thread_local std::vector<Input> inputs;
  inputs.clear();
  std::optional<mesh::DeviceMesh>
      mesh_holder;  // a handle, not a pointer: an in-place reset may drop the spec
  for_each_tensor(args, [&](size_t i, int64_t, const at::Tensor& t) {
    const DTensorSpec* s = is_dtensor(t) ? &dtensor_impl(t)->spec() : nullptr;
    if (s && !mesh_holder) mesh_holder = s->mesh;
    inputs.push_back({t, s, i});
  });
  if (!mesh_holder) mesh_holder = default_mesh();
  const mesh::DeviceMesh* mesh = &*mesh_holder;
  auto plain_spec = [&](const at::Tensor& t) {
    return DTensorSpec{*mesh, replicate_all(mesh->ndim()), t.sizes().vec(), t.scalar_type()};
  };
  // What a replayed call must match besides the specs: the other arguments, and the dtype and
  // shape of plain-tensor inputs.
  // On replay the facts come with the tape entry; else from the per-thread table.
  const OpFacts* facts = nullptr;
  auto replay_key = [](const OpFacts& f, c10::ArrayRef<c10::IValue> call_args,
                       const std::vector<Input>& ins, std::vector<int64_t>& out) {
    out.clear();
    for (size_t i = 0; i < call_args.size(); ++i) {
      const auto& v = call_args[i];
      if (!ins.empty() && f.neutral[i]) continue;
      const bool tensors =
          v.isTensor() || v.isTensorList() ||
          (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType);
      if (tensors) continue;
      if (!key_of(v, out)) return false;
    }
    for (const auto& in : ins) {
      if (in.spec) continue;
      out.push_back(static_cast<int64_t>(in.tensor.scalar_type()));
      for (auto d : in.tensor.sizes()) out.push_back(d);
      out.push_back(-1);
    }
    return true;
  };

  auto op_name = [&] {
    return "aten::" + std::string(schema.name().substr(schema.name().find("::") + 2)) +
           (schema.overload_name().empty() ? "" : "." + schema.overload_name());
  };
  std::shared_ptr<const Plan> plan;
  bool record = false;
  const bool tape_on = g_static_eager.load(std::memory_order_relaxed);
  Tape& tape = t_tape;
  if (tape_on) {
    const int64_t step = g_step.load(std::memory_order_relaxed);
    if (tape.step != step) tape.step = step, tape.cursor = 0;
    if (tape.cursor < tape.entries.size()) {
      const TapeEntry& e = tape.entries[tape.cursor];
      bool same = e.schema == &schema && e.specs.size() == inputs.size();
      for (size_t i = 0; same && i < inputs.size(); ++i)
        same = same_spec(e.specs[i], inputs[i].spec);
      if (same) {
        thread_local std::vector<int64_t> arg_key;
        same = replay_key(*e.facts, args, inputs, arg_key) && arg_key == e.arg_key;
      }
      if (same) {
        plan = e.plan;
        facts = e.facts;
        ++tape.cursor;
        ++g_replayed;
        goto run_plan;
      }
      ++g_diverged;
      if (std::getenv("VESCALE_DEBUG_TAPE"))
        std::fprintf(stderr, "tape: step %lld call %zu: %s differs from the recorded %s\n",
                     static_cast<long long>(step), tape.cursor, op_name().c_str(),
                     e.schema->name().c_str());
    }
  }
  {
    facts = &op_facts(schema);
    // 2. Propagation, cached by (op, mesh, input specs, other arguments). The mesh is part of the
    //    key: factory calls have no input spec that would name it.
    thread_local std::vector<int64_t> key;
    key.clear();
    key.push_back(reinterpret_cast<int64_t>(&schema));
    key.push_back(reinterpret_cast<int64_t>(mesh->id()));
    for (auto& in : inputs) {
      if (in.spec) {
        VESCALE_CHECK(in.spec->mesh == *mesh, "DTensor: ", schema.operator_name(),
                      " mixes DTensors on different meshes");
        key_of(*in.spec, key);
      } else {
        key.push_back(-2);
        key.push_back(static_cast<int64_t>(in.tensor.scalar_type()));
        for (auto d : in.tensor.sizes()) key.push_back(d);
        key.push_back(-1);
      }
    }
    bool cacheable = true;
    for (size_t i = 0; i < args.size() && cacheable; ++i) {
      const auto& v = args[i];
      const bool tensors =
          v.isTensor() || v.isTensorList() ||
          (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType);
      if (tensors) continue;  // keyed through their specs
      if (!inputs.empty() && facts->neutral[i]) continue;
      cacheable = key_of(v, key);
    }
    if (cacheable) {
      if (auto it = t_cache.find(key); it != t_cache.end()) {
        plan = it->second;
        ++g_hits;
      }
    }
    if (tape_on && cacheable) {
      // Missed the replay: record this call (after propagation, below) at this position.
      tape.entries.resize(tape.cursor);
      record = true;
    }
    if (!plan) {
      std::vector<DTensorSpec> specs;
      std::vector<size_t> spec_arg;
      for (auto& in : inputs) {
        specs.push_back(in.spec ? *in.spec : plain_spec(in.tensor));
        spec_arg.push_back(in.arg);
      }
      plan = propagate(op, op_name(), args, specs, spec_arg, *mesh);
      if (cacheable) t_cache.emplace(key, plan);
    }
    if (record) {
      TapeEntry e{&schema, facts, {}, {}, plan};
      for (auto& in : inputs)
        e.specs.push_back(in.spec ? dtensor_impl(in.tensor)->spec_ptr() : nullptr);
      replay_key(*facts, args, inputs, e.arg_key);
      tape.entries.push_back(std::move(e));
      ++tape.cursor;
      ++g_recorded;
    }
  }
run_plan:

  // 3. Local inputs, redistributed where the plan says so.
  // `inputs` holds the caller's tensors (the stack no longer does) while their specs are in
  // use; returns that alias a written input give back the caller's tensor, kept here.
  const std::vector<c10::IValue> caller_args =
      facts->returns_written ? args : std::vector<c10::IValue>{};
  static const c10::Device device = [] { return c10::Device(dist::device_string()); }();
  size_t k = 0;
  map_args(args, device, [&](size_t i, int64_t, const at::Tensor& t) -> at::Tensor {
    const auto& want = plan->inputs[k];
    const DTensorSpec* have_ptr = inputs[k++].spec;
    at::Tensor local = have_ptr ? dtensor_impl(t)->local() : t;
    const Placements& have_p = have_ptr ? have_ptr->placements : want;
    if (have_ptr ? want == have_p
                 : std::all_of(want.begin(), want.end(), [](auto& p) { return p.is_replicate(); }))
      return local;
    ++g_redistributions;
    const DTensorSpec have = have_ptr ? *have_ptr : plain_spec(t);
    log_redistribution(schema.name().c_str(), static_cast<int64_t>(i), have.placements, want);
    at::Tensor moved = redistribute_local(local, have, want);
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite()) {
      // An in-place op on a tensor in the wrong placements: the tensor itself changes
      // representation (same global value), then the op writes into its new shard.
      VESCALE_CHECK(have_ptr, "DTensor: ", op_name(),
                    " writes into a plain tensor with DTensor inputs");
      DTensorSpec spec = have;
      spec.placements = want;
      if (!moved.is_contiguous() || moved.data_ptr() == local.data_ptr()) moved = moved.clone();
      reset_dtensor(t, moved, std::make_shared<const DTensorSpec>(std::move(spec)));
    }
    return moved;
  });

  // 4. Run on the local shards, below autograd (it already ran on the DTensors).
  for (auto& a : args) stack->push_back(std::move(a));
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    if (plan->local_fn)
      plan->local_fn(*stack);
    else
      op.callBoxed(*stack);
  }

  // 5. Wrap: a return that aliases a mutated input is that input (the caller's DTensor, whose
  //    shard was updated in place); the other tensor returns become new DTensors.
  const size_t n_returns = facts->returns.size();
  std::vector<c10::IValue> results(
      std::make_move_iterator(stack->end() - static_cast<long>(n_returns)),
      std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, n_returns);
  size_t out_i = 0;
  for (size_t r = 0; r < n_returns; ++r) {
    const OpFacts::Return& fr = facts->returns[r];
    c10::IValue v = std::move(results[r]);
    if (fr.written) {
      if (const int a = fr.written_arg; a >= 0) {
        VESCALE_CHECK(!caller_args[a].isTensor() || is_dtensor(caller_args[a].toTensor()),
                      "DTensor: ", op_name(),
                      " writes into a plain tensor with DTensor inputs; make it a DTensor first");
        v = caller_args[a];
      }
    } else if (v.isTensor() && v.toTensor().defined()) {
      // Moved out, not copied: make_dtensor tells a fresh shard from a shared one by its count.
      at::Tensor local = std::move(v).toTensor();
      auto spec = output_spec(*plan, *mesh, out_i, 0, local);
      if (plan->dims_from.empty() || !inputs[0].spec) {
        v = make_dtensor(std::move(local), std::move(spec));
      } else {
        const auto in_strides = inputs[0].tensor.strides();
        c10::SmallVector<int64_t, 6> strides;
        for (int64_t d : plan->dims_from) strides.push_back(in_strides[d]);
        v = make_dtensor(std::move(local), std::move(spec), strides);
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      c10::List<at::Tensor> locals = std::move(v).toTensorList();
      for (size_t j = 0; j < locals.size(); ++j) {
        at::Tensor local = locals.extract(j);
        auto spec = output_spec(*plan, *mesh, out_i, j, local);
        out.push_back(make_dtensor(std::move(local), std::move(spec)));
      }
      v = out;
    }
    if (fr.tensor_like) ++out_i;
    stack->push_back(std::move(v));
  }
}

}  // namespace vescale::dtensor
