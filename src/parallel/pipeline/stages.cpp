#include "vescale/parallel/pipeline/stages.h"

#include <algorithm>

#include "vescale/common/check.h"
#include "vescale/common/suggest.h"

namespace vescale::parallel::pipeline {

std::vector<int64_t> stage_starts(const std::vector<std::string>& layers,
                                  const plan::PipelineSpec& spec, int64_t stages,
                                  const std::string& source) {
  const auto n = static_cast<int64_t>(layers.size());
  const std::string where = "plan '" + source + "': pipeline";
  VESCALE_CHECK(stages <= n, where, ": ", stages, " stages for a model of ", n,
                " layers (the embedding and the head count as layers); use fewer stages "
                "(pipeline size x chunks)");
  std::vector<int64_t> starts;
  if (spec.stages.empty()) {
    for (int64_t k = 0; k < stages; ++k) starts.push_back(k * n / stages);
    return starts;
  }
  VESCALE_CHECK(static_cast<int64_t>(spec.stages.size()) == stages, where, ".stages lists ",
                spec.stages.size(), " stages, but the mesh and pipeline.chunks make ", stages,
                "; list one first layer per stage");
  int64_t named_prev = -1;
  for (size_t k = 0; k < spec.stages.size(); ++k) {
    const std::string& name = spec.stages[k];
    auto it = std::find(layers.begin(), layers.end(), name);
    if (it == layers.end()) {
      const std::string guess = closest_match(name, layers);
      VESCALE_FAIL(where, ".stages[", k, "]: '", name, "' is not one of the model's layers (",
                   layers.front(), " .. ", layers.back(), ")",
                   guess.empty() ? std::string() : "; did you mean '" + guess + "'?");
    }
    const int64_t named = it - layers.begin();
    VESCALE_CHECK(named > named_prev, where, ".stages[", k, "]: '", name,
                  "' does not come after stage ", k - 1, "'s first layer '", spec.stages[k - 1],
                  "'; list the stages in layer order, each with at least one layer");
    named_prev = named;
    starts.push_back(k == 0 ? 0 : named);
  }
  return starts;
}

}  // namespace vescale::parallel::pipeline
