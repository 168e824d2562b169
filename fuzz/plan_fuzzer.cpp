// libFuzzer target for the plan parser: any bytes given to Plan::from_json, to resolve(),
// phase_for() and forward_for() over a small fixed model, and (split at the first newline) to
// fqn_match(pattern, name) must either work or throw vescale::Error. A crash, a hang, a sanitizer
// report, or any other exception escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/plan/plan.h"

namespace {

using vescale::plan::Plan;

const std::vector<std::pair<std::string, std::vector<int64_t>>>& params() {
  static const std::vector<std::pair<std::string, std::vector<int64_t>>> p = {
      {"tok_embeddings.weight", {256, 64}},
      {"layers.0.attention.wq.weight", {64, 64}},
      {"layers.0.attention.wo.weight", {64, 64}},
      {"layers.1.feed_forward.w2.weight", {128, 64}},
      {"norm.weight", {64}},
      {"scale", {}},
  };
  return p;
}

void fuzz_plan(const std::string& text) {
  Plan plan;
  try {
    plan = Plan::from_json(text, "fuzz.json");
  } catch (const vescale::Error&) {
    return;
  }
  for (const auto& mesh : {plan.mesh_dims(), std::vector<std::string>{"dp", "tp"}}) {
    try {
      plan.resolve(mesh, params());
    } catch (const vescale::Error&) {
    }
  }
  for (const auto& [name, shape] : params()) {
    try {
      plan.phase_for(name);
    } catch (const vescale::Error&) {
    }
  }
  for (const char* module : {"layers.0.attention_norm", "output", ""}) {
    try {
      plan.forward_for(module);
    } catch (const vescale::Error&) {
    }
  }
}

void fuzz_match(const std::string& text) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return;
  // Real names are short; a long one only makes each run slower.
  const std::string pattern = text.substr(0, nl), name = text.substr(nl + 1, 256);
  try {
    vescale::plan::fqn_match(pattern, name);
  } catch (const vescale::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz_plan(text);
  fuzz_match(text);
  return 0;
}
