// Static eager (docs/dtensor.md): each thread records the plans of a step's calls in order; later
// steps replay them by position.
#include <cstdio>
#include <cstdlib>

#include "dtensor/call_plan.h"
#include "dtensor/dtensor_impl.h"
#include "vescale/dtensor/dtensor.h"

namespace vescale::dtensor {

namespace {

// A replayed call checks only that it is the same op with the
// same input specs (pointer-equal in the steady state) and the same other arguments, then uses
// the recorded plan: no key of the tensor specs, no hashing, no lookup. Any difference falls
// back to eager from that position on and records anew.
struct TapeEntry {
  const c10::FunctionSchema* schema;
  const OpFacts* facts;
  std::vector<std::shared_ptr<const DTensorSpec>> specs;  // per input; null for a plain tensor
  std::vector<int64_t> arg_key;                           // the non-tensor arguments
  std::shared_ptr<const CallPlan> plan;
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

// What a replayed call must match besides the specs: the other arguments, and the dtype and
// shape of plain-tensor inputs.
bool replay_key(const OpFacts& f, c10::ArrayRef<c10::IValue> call_args,
                const std::vector<CallInput>& ins, std::vector<int64_t>& out) {
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
}

}  // namespace

bool static_eager_on() { return g_static_eager.load(std::memory_order_relaxed); }

std::optional<TapeHit> replay(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                              const std::vector<CallInput>& inputs) {
  Tape& tape = t_tape;
  const int64_t step = g_step.load(std::memory_order_relaxed);
  if (tape.step != step) tape.step = step, tape.cursor = 0;
  if (tape.cursor >= tape.entries.size()) return std::nullopt;
  const TapeEntry& e = tape.entries[tape.cursor];
  bool same = e.schema == &schema && e.specs.size() == inputs.size();
  for (size_t i = 0; same && i < inputs.size(); ++i) same = same_spec(e.specs[i], inputs[i].spec);
  if (same) {
    thread_local std::vector<int64_t> arg_key;
    same = replay_key(*e.facts, args, inputs, arg_key) && arg_key == e.arg_key;
  }
  if (same) {
    ++tape.cursor;
    ++g_replayed;
    return TapeHit{e.plan, e.facts};
  }
  ++g_diverged;
  if (std::getenv("VESCALE_DEBUG_TAPE"))
    std::fprintf(stderr, "tape: step %lld call %zu: %s differs from the recorded %s\n",
                 static_cast<long long>(step), tape.cursor, op_name(schema).c_str(),
                 e.schema->name().c_str());
  return std::nullopt;
}

void record(const c10::FunctionSchema& schema, const OpFacts& facts,
            c10::ArrayRef<c10::IValue> args, const std::vector<CallInput>& inputs,
            std::shared_ptr<const CallPlan> plan) {
  // Missed the replay: this call takes this position, and what was recorded after it goes.
  Tape& tape = t_tape;
  tape.entries.resize(tape.cursor);
  TapeEntry e{&schema, &facts, {}, {}, std::move(plan)};
  for (auto& in : inputs)
    e.specs.push_back(in.spec ? dtensor_impl(in.tensor)->spec_ptr() : nullptr);
  replay_key(facts, args, inputs, e.arg_key);
  tape.entries.push_back(std::move(e));
  ++tape.cursor;
  ++g_recorded;
}

void set_static_eager(bool on) {
  g_static_eager = on;
  ++g_step;
}

bool static_eager() { return g_static_eager.load(); }

void static_eager_step() { ++g_step; }

StaticEagerStats static_eager_stats() {
  return {g_replayed.load(), g_recorded.load(), g_diverged.load()};
}

}  // namespace vescale::dtensor
