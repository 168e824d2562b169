// The per-thread cache of call plans, keyed by (op, mesh, input specs, other arguments), and what
// the key is made of: the facts of an op's schema and value-identities of arguments.
#include <ATen/ATen.h>

#include <cstring>
#include <unordered_map>

#include "dtensor/call_plan.h"
#include "dtensor/propagation.h"
#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    size_t h = 1469598103934665603ull;
    for (auto v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// Per thread: backward runs on the autograd engine's thread, forward on the caller's.
thread_local std::unordered_map<std::vector<int64_t>, std::shared_ptr<const CallPlan>, KeyHash>
    t_cache;

// Scalar and float arguments (alpha, a fill value, a learning-rate factor, eps, dropout p)
// never change how an op with tensor inputs is sharded, and their values change every step in
// optimizers: keyed by value they would fill the cache and defeat static eager. (Factories
// have no tensor input, and arange's Scalar end sets the shape, so they keep them.)
bool sharding_neutral(const c10::Argument& a) {
  auto kind = a.type()->kind();
  if (kind == c10::TypeKind::OptionalType) kind = a.type()->containedType(0)->kind();
  return kind == c10::TypeKind::NumberType || kind == c10::TypeKind::FloatType;
}

void key_of(const DTensorSpec& s, std::vector<int64_t>& key) {
  key.push_back(reinterpret_cast<int64_t>(s.mesh.id()));
  for (auto& p : s.placements)
    key.push_back(static_cast<int64_t>(p.kind) * 4096 + p.dim * 8 + static_cast<int64_t>(p.reduce));
  key.push_back(static_cast<int64_t>(s.dtype));
  for (auto d : s.shape) key.push_back(d);
  key.push_back(-1);
}

}  // namespace

DispatchCounters& counters() {
  static DispatchCounters c;
  return c;
}

std::string op_name(const c10::FunctionSchema& schema) {
  return schema.name() + (schema.overload_name().empty() ? "" : "." + schema.overload_name());
}

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

std::string describe_inputs(const std::vector<DTensorSpec>& specs) {
  std::string s;
  for (auto& x : specs)
    s += (s.empty() ? "" : ", ") + to_string(x.placements) + c10::str(c10::IntArrayRef(x.shape));
  return "(" + s + ")";
}

std::shared_ptr<const CallPlan> cached_plan(const c10::OperatorHandle& op, const OpFacts& facts,
                                            c10::ArrayRef<c10::IValue> args,
                                            const std::vector<CallInput>& inputs,
                                            const mesh::DeviceMesh& mesh, bool& cacheable) {
  const auto& schema = op.schema();
  // The mesh is part of the key: factory calls have no input spec that would name it.
  thread_local std::vector<int64_t> key;
  key.clear();
  key.push_back(reinterpret_cast<int64_t>(&schema));
  key.push_back(reinterpret_cast<int64_t>(mesh.id()));
  for (auto& in : inputs) {
    if (in.spec) {
      VESCALE_CHECK(in.spec->mesh == mesh, "DTensor: ", schema.operator_name(),
                    " mixes DTensors on different meshes");
      key_of(*in.spec, key);
    } else {
      key.push_back(-2);
      key.push_back(static_cast<int64_t>(in.tensor.scalar_type()));
      for (auto d : in.tensor.sizes()) key.push_back(d);
      key.push_back(-1);
    }
  }
  cacheable = true;
  for (size_t i = 0; i < args.size() && cacheable; ++i) {
    const auto& v = args[i];
    const bool tensors =
        v.isTensor() || v.isTensorList() ||
        (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType);
    if (tensors) continue;  // keyed through their specs
    if (!inputs.empty() && facts.neutral[i]) continue;
    cacheable = key_of(v, key);
  }
  if (cacheable) {
    if (auto it = t_cache.find(key); it != t_cache.end()) {
      ++counters().hits;
      return it->second;
    }
  }
  std::vector<DTensorSpec> specs;
  std::vector<size_t> spec_arg;
  for (auto& in : inputs) {
    specs.push_back(in.spec ? *in.spec
                            : DTensorSpec{mesh, replicate_all(mesh.ndim()), in.tensor.sizes().vec(),
                                          in.tensor.scalar_type()});
    spec_arg.push_back(in.arg);
  }
  auto plan = propagate(op, op_name(schema), args, specs, spec_arg, mesh);
  if (cacheable) t_cache.emplace(key, plan);
  return plan;
}

void clear_propagation_cache() { t_cache.clear(); }

DispatchStats dispatch_stats() {
  auto& c = counters();
  return {c.calls.load(), c.hits.load(), c.bypasses.load(), c.redistributions.load(),
          c.in_place_sums.load()};
}

void reset_dispatch_stats() {
  auto& c = counters();
  c.calls = 0;
  c.hits = 0;
  c.bypasses = 0;
  c.redistributions = 0;
  c.in_place_sums = 0;
}

void count_in_place_sum() { counters().in_place_sums.fetch_add(1, std::memory_order_relaxed); }

}  // namespace vescale::dtensor
