#include "vescale/plan/parallel_dims.h"

#include <algorithm>

#include "vescale/common/check.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace vescale::plan {

ParallelDims::ParallelDims(std::vector<std::pair<std::string, int64_t>> mesh, const Plan* plan)
    : dims(std::move(mesh)) {
  if (plan && plan->pipeline()) pipeline = plan->pipeline()->dim;
  for (const auto& [name, size] : dims)
    if (name == kDataDim || name == kExpertDim) data.push_back(name);
  // A plan's context dim that the mesh lacks: the model's mesh (the dim joined to dp already),
  // or a layout validate() refuses.
  const std::string named = plan && plan->context() ? plan->context()->dim : kContextDim;
  if (std::any_of(dims.begin(), dims.end(), [&](const auto& d) { return d.first == named; }))
    context = named;
  VESCALE_CHECK(context.empty() || !is_data(context), "mesh dim '", context,
                "' cannot both split sequences (context) and the batch; name another dim");
}

namespace {
std::vector<std::pair<std::string, int64_t>> dims_of(const mesh::MeshShape& m) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (int64_t i = 0; i < m.ndim(); ++i) out.emplace_back(m.names()[i], m.sizes()[i]);
  return out;
}
}  // namespace

ParallelDims::ParallelDims(const mesh::MeshShape& mesh, const Plan* plan)
    : ParallelDims(dims_of(mesh), plan) {}

int64_t ParallelDims::size(const std::string& dim) const {
  for (const auto& [name, size] : dims)
    if (name == dim) return size;
  return 1;
}

int64_t ParallelDims::data_size() const {
  int64_t n = 1;
  for (const auto& d : data) n *= size(d);
  return n;
}

bool ParallelDims::is_data(const std::string& dim) const {
  return std::find(data.begin(), data.end(), dim) != data.end();
}

std::vector<std::pair<std::string, int64_t>> ParallelDims::stage_dims() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& d : model_dims())
    if (d.first != pipeline) out.push_back(d);
  return out;
}

std::vector<std::pair<std::string, int64_t>> ParallelDims::model_dims() const {
  if (context.empty()) return dims;
  const bool has_dp =
      std::any_of(dims.begin(), dims.end(), [](const auto& d) { return d.first == kDataDim; });
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [name, n] : dims) {
    if (name != context) {
      out.emplace_back(name, n);
      continue;
    }
    const bool after_dp = !out.empty() && out.back().first == kDataDim;
    VESCALE_CHECK(after_dp || !has_dp, "parallel.mesh: put the context dim '", context,
                  "' right after 'dp' (e.g. {\"dp\": 2, \"", context,
                  "\": 2, \"tp\": 2}): it joins dp for the gradient reduction and ZeRO");
    if (after_dp)
      out.back().second *= n;
    else
      out.emplace_back(kDataDim, n);
  }
  return out;
}

}  // namespace vescale::plan
