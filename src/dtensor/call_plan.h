// Internal: what the steps of DTensor dispatch (dispatch.cpp) share. A call's plan, the facts of
// an op's schema, the walk over a call's tensors, the propagation that makes a plan (from the
// op's rule, propagation.cpp), the cache of plans (op_cache.cpp) and the static-eager tape
// (static_eager.cpp).
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vescale/dtensor/dtensor_spec.h"
#include "vescale/mesh/device_mesh.h"

namespace vescale::dtensor {

// What propagation decided for one (op, input specs, arguments) combination.
struct CallPlan {
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

// What dispatch reads from an op's schema, once per op and thread: walking the arguments' and
// returns' types on every call costs cache misses between the kernels.
struct OpFacts {
  std::vector<uint8_t> neutral;  // per argument: never changes the sharding (see op_cache.cpp)
  struct Return {
    bool tensor_like = false;  // Tensor or Tensor[]
    bool written = false;      // aliases an input the op writes into
    int written_arg = -1;      // that input
  };
  std::vector<Return> returns;
  bool returns_written = false;
};
const OpFacts& op_facts(const c10::FunctionSchema& schema);

// One tensor input of a call.
struct CallInput {
  at::Tensor tensor;        // held: a Tensor[] element is a temporary
  const DTensorSpec* spec;  // null for a plain tensor; lives in the impl, which `tensor` holds
  size_t arg;               // its schema argument
};

// "aten::mm", "vescale::causal_attention_forward", "aten::add.Tensor".
std::string op_name(const c10::FunctionSchema& schema);

// The plan for a call from its op's rule (propagation.cpp).
std::shared_ptr<const CallPlan> propagate(const c10::OperatorHandle& op, const std::string& name,
                                          c10::ArrayRef<c10::IValue> args,
                                          const std::vector<DTensorSpec>& specs,
                                          const std::vector<size_t>& spec_arg,
                                          const mesh::DeviceMesh& mesh);
// The spec of output (r, j): cached by the plan; else built from the local result.
std::shared_ptr<const DTensorSpec> output_spec(const CallPlan& plan, const mesh::DeviceMesh& mesh,
                                               size_t r, size_t j, const at::Tensor& local);

// The plan for a call, from the per-thread cache or propagated (op_cache.cpp). `key` is left
// holding the call's cache key; `cacheable` says whether it has one.
std::shared_ptr<const CallPlan> cached_plan(const c10::OperatorHandle& op, const OpFacts& facts,
                                            c10::ArrayRef<c10::IValue> args,
                                            const std::vector<CallInput>& inputs,
                                            const mesh::DeviceMesh& mesh, bool& cacheable);
// A value-identity of a non-tensor argument appended to `key`; false if it has none.
bool key_of(const c10::IValue& v, std::vector<int64_t>& key);

// The static-eager tape (static_eager.cpp): the recorded plan for this position of the step, or
// null (then record() the plan the call took, when it is cacheable).
struct TapeHit {
  std::shared_ptr<const CallPlan> plan;
  const OpFacts* facts = nullptr;
};
bool static_eager_on();
std::optional<TapeHit> replay(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                              const std::vector<CallInput>& inputs);
void record(const c10::FunctionSchema& schema, const OpFacts& facts,
            c10::ArrayRef<c10::IValue> args, const std::vector<CallInput>& inputs,
            std::shared_ptr<const CallPlan> plan);

// Counters behind dispatch_stats().
struct DispatchCounters {
  std::atomic<int64_t> calls{0}, hits{0}, bypasses{0}, redistributions{0}, in_place_sums{0};
};
DispatchCounters& counters();

std::string describe_inputs(const std::vector<DTensorSpec>& specs);

// Calls f(arg index, list index or -1, tensor) for every defined tensor argument.
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

}  // namespace vescale::dtensor
