#include "vescale/plan/context_spec.h"

namespace vescale::plan {

const char* to_string(ContextAttention a) {
  return a == ContextAttention::Ring ? "ring" : "allgather";
}

std::optional<ContextAttention> context_attention_named(const std::string& name) {
  if (name == "ring") return ContextAttention::Ring;
  if (name == "allgather") return ContextAttention::AllGather;
  return std::nullopt;
}

}  // namespace vescale::plan
