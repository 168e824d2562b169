// The "context" section of a plan (docs/context_parallel.md): the mesh dim that splits each
// sequence, how attention crosses the split, and how the chunks are dealt. Plain C++: the plan
// parser, the trainer, the dry run and the attention boundary read it.
#pragma once
#include <optional>
#include <string>

namespace vescale::plan {

// The conventional name of the context-parallel mesh dim: a mesh with it splits sequences
// even without a plan section (the section then takes its defaults).
inline constexpr const char* kContextDim = "cp";

// ring: K and V travel around the cp ring by P2P; allgather: K and V all-gathered at once.
enum class ContextAttention { Ring, AllGather };
const char* to_string(ContextAttention a);  // "ring", "allgather"
std::optional<ContextAttention> context_attention_named(const std::string& name);

struct ContextSpec {
  std::string dim = kContextDim;
  ContextAttention attention = ContextAttention::Ring;
  // 2cp chunks, rank r holding chunks r and 2cp-1-r (equal causal work); false: cp in order.
  bool zigzag = true;
};

}  // namespace vescale::plan
