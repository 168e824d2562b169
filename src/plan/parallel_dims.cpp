#include "vescale/plan/parallel_dims.h"

#include <algorithm>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"

namespace vescale::plan {

ParallelDims::ParallelDims(std::vector<std::pair<std::string, int64_t>> mesh, const Plan* plan)
    : dims(std::move(mesh)) {
  if (plan && plan->pipeline()) pipeline = plan->pipeline()->dim;
  for (const auto& [name, size] : dims)
    if (name == kDataDim || name == kExpertDim) data.push_back(name);
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
  for (const auto& d : dims)
    if (d.first != pipeline) out.push_back(d);
  return out;
}

}  // namespace vescale::plan
