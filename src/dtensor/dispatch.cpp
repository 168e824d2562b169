// The boxed fallback: every op on a DTensor, in five steps (docs/dtensor.md): gather the inputs'
// specs; find the call's plan (the static-eager tape, else the cache, else propagation through the
// op's rule); bring the local inputs to the plan's placements; run the op on the shards; wrap the
// outputs as DTensors.
#include "dtensor/dispatch.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <optional>

#include "dtensor/call_plan.h"
#include "dtensor/dtensor_impl.h"
#include "dtensor/propagation.h"
#include "dtensor/redistribute.h"
#include "vescale/common/check.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

// 1. The tensor inputs: DTensors with their specs; plain tensors count as Replicate. The hot path
//    only reads the specs in place. The mesh is the first DTensor's (a handle, not a pointer: an
//    in-place reset may drop the spec), else the default mesh (factories).
mesh::DeviceMesh gather_inputs(c10::ArrayRef<c10::IValue> args, std::vector<CallInput>& inputs) {
  inputs.clear();
  std::optional<mesh::DeviceMesh> mesh;
  for_each_tensor(args, [&](size_t i, int64_t, const at::Tensor& t) {
    const DTensorSpec* s = is_dtensor(t) ? &dtensor_impl(t)->spec() : nullptr;
    if (s && !mesh) mesh = s->mesh;
    inputs.push_back({t, s, i});
  });
  return mesh ? *mesh : default_mesh();
}

// 2. The plan: replayed from the tape in static eager, else cached or propagated (and recorded).
std::shared_ptr<const CallPlan> find_plan(const c10::OperatorHandle& op,
                                          c10::ArrayRef<c10::IValue> args,
                                          const std::vector<CallInput>& inputs,
                                          const mesh::DeviceMesh& mesh, const OpFacts*& facts) {
  const auto& schema = op.schema();
  const bool tape_on = static_eager_on();
  if (tape_on) {
    if (auto hit = replay(schema, args, inputs)) {
      facts = hit->facts;
      return std::move(hit->plan);
    }
  }
  facts = &op_facts(schema);
  bool cacheable = false;
  auto plan = cached_plan(op, *facts, args, inputs, mesh, cacheable);
  if (tape_on && cacheable) record(schema, *facts, args, inputs, plan);
  return plan;
}

// 3. The local inputs, redistributed where the plan says so. An in-place op on a tensor in the
//    wrong placements changes that tensor's representation (same global value) first.
void localize_inputs(const c10::FunctionSchema& schema, const CallPlan& plan,
                     const mesh::DeviceMesh& mesh, const std::vector<CallInput>& inputs,
                     std::vector<c10::IValue>& args) {
  // The mesh's device, not one cached per process: a process may leave a cpu world and join a
  // cuda one (the cuda training test does).
  const c10::Device device =
      mesh.device_type() == "cpu" ? c10::Device(c10::kCPU) : c10::Device(dist::device_string());
  size_t k = 0;
  map_args(args, device, [&](size_t i, int64_t, const at::Tensor& t) -> at::Tensor {
    const auto& want = plan.inputs[k];
    const DTensorSpec* have_ptr = inputs[k++].spec;
    at::Tensor local = have_ptr ? dtensor_impl(t)->local() : t;
    const Placements& have_p = have_ptr ? have_ptr->placements : want;
    if (have_ptr ? want == have_p
                 : std::all_of(want.begin(), want.end(), [](auto& p) { return p.is_replicate(); }))
      return local;
    ++counters().redistributions;
    const DTensorSpec have =
        have_ptr ? *have_ptr
                 : DTensorSpec{mesh, replicate_all(mesh.ndim()), t.sizes().vec(), t.scalar_type()};
    log_redistribution(schema.name().c_str(), static_cast<int64_t>(i), have.placements, want);
    at::Tensor moved = redistribute_local(local, have, want);
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite()) {
      VESCALE_CHECK(have_ptr, "DTensor: ", op_name(schema),
                    " writes into a plain tensor with DTensor inputs");
      DTensorSpec spec = have;
      spec.placements = want;
      if (!moved.is_contiguous() || moved.data_ptr() == local.data_ptr()) moved = moved.clone();
      reset_dtensor(t, moved, std::make_shared<const DTensorSpec>(std::move(spec)));
    }
    return moved;
  });
}

// 4. The op on the local shards, below autograd (it already ran on the DTensors).
void run_local(const c10::OperatorHandle& op, const CallPlan& plan, std::vector<c10::IValue>& args,
               torch::jit::Stack* stack) {
  for (auto& a : args) stack->push_back(std::move(a));
  at::AutoDispatchBelowADInplaceOrView guard;
  if (plan.local_fn)
    plan.local_fn(*stack);
  else
    op.callBoxed(*stack);
}

// 5. The outputs: a return that aliases a mutated input is that input (the caller's DTensor,
//    whose shard was updated in place); the other tensor returns become new DTensors.
void wrap_outputs(const c10::OperatorHandle& op, const CallPlan& plan, const OpFacts& facts,
                  const mesh::DeviceMesh& mesh, const std::vector<CallInput>& inputs,
                  const std::vector<c10::IValue>& caller_args, torch::jit::Stack* stack) {
  const size_t n_returns = facts.returns.size();
  std::vector<c10::IValue> results(
      std::make_move_iterator(stack->end() - static_cast<long>(n_returns)),
      std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, n_returns);
  size_t out_i = 0;
  for (size_t r = 0; r < n_returns; ++r) {
    const OpFacts::Return& fr = facts.returns[r];
    c10::IValue v = std::move(results[r]);
    if (fr.written) {
      if (const int a = fr.written_arg; a >= 0) {
        VESCALE_CHECK(!caller_args[a].isTensor() || is_dtensor(caller_args[a].toTensor()),
                      "DTensor: ", op_name(op.schema()),
                      " writes into a plain tensor with DTensor inputs; make it a DTensor first");
        v = caller_args[a];
      }
    } else if (v.isTensor() && v.toTensor().defined()) {
      // Moved out, not copied: make_dtensor tells a fresh shard from a shared one by its count.
      at::Tensor local = std::move(v).toTensor();
      auto spec = output_spec(plan, mesh, out_i, 0, local);
      if (plan.dims_from.empty() || !inputs[0].spec) {
        v = make_dtensor(std::move(local), std::move(spec));
      } else {
        const auto in_strides = inputs[0].tensor.strides();
        c10::SmallVector<int64_t, 6> strides;
        for (int64_t d : plan.dims_from) strides.push_back(in_strides[d]);
        v = make_dtensor(std::move(local), std::move(spec), strides);
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> out;
      c10::List<at::Tensor> locals = std::move(v).toTensorList();
      for (size_t j = 0; j < locals.size(); ++j) {
        at::Tensor local = locals.extract(j);
        auto spec = output_spec(plan, mesh, out_i, j, local);
        out.push_back(make_dtensor(std::move(local), std::move(spec)));
      }
      v = out;
    }
    if (fr.tensor_like) ++out_i;
    stack->push_back(std::move(v));
  }
}

}  // namespace

void dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  ++counters().calls;
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - nargs),
                                std::make_move_iterator(stack->end()));
  torch::jit::drop(*stack, nargs);
  // `inputs` holds the caller's tensors (the stack no longer does) while their specs are in use.
  thread_local std::vector<CallInput> inputs;
  const mesh::DeviceMesh mesh = gather_inputs(args, inputs);
  const OpFacts* facts = nullptr;
  const std::shared_ptr<const CallPlan> plan = find_plan(op, args, inputs, mesh, facts);
  // Returns that alias a written input give back the caller's tensor, kept here.
  const std::vector<c10::IValue> caller_args =
      facts->returns_written ? args : std::vector<c10::IValue>{};
  localize_inputs(schema, *plan, mesh, inputs, args);
  run_local(op, *plan, args, stack);
  wrap_outputs(op, *plan, *facts, mesh, inputs, caller_args, stack);
}

}  // namespace vescale::dtensor
