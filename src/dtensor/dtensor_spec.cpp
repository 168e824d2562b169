#include "vescale/dtensor/dtensor_spec.h"

#include "vescale/common/check.h"

namespace vescale::dtensor {

ChunkRange chunk_range(int64_t dim_size, int64_t count, int64_t index) {
  const int64_t chunk = (dim_size + count - 1) / count;  // torch.chunk: ceil, the tail is short
  const int64_t begin = std::min(dim_size, chunk * index);
  const int64_t end = std::min(dim_size, chunk * (index + 1));
  return {begin, end - begin};
}

void DTensorSpec::validate_and_normalize() {
  VESCALE_CHECK(mesh.valid(), "DTensorSpec: no mesh");
  VESCALE_CHECK(static_cast<int64_t>(placements.size()) == mesh.ndim(),
                "DTensorSpec: ", placements.size(), " placements ", dtensor::to_string(placements),
                " for a ", mesh.ndim(), "-D mesh; give one placement per mesh dim");
  for (auto& p : placements) {
    if (!p.is_shard()) continue;
    const int64_t orig = p.dim;
    if (p.dim < 0) p.dim += ndim();
    VESCALE_CHECK(p.dim >= 0 && p.dim < ndim(), "DTensorSpec: Shard(", orig,
                  ") is out of range for a ", ndim(), "-D tensor of shape ",
                  c10::IntArrayRef(shape));
  }
}

std::vector<int64_t> DTensorSpec::local_shape_at(const std::vector<int64_t>& coord) const {
  std::vector<int64_t> s = shape;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    const int64_t d = placements[m].dim;
    s[d] = chunk_range(s[d], mesh.shape().sizes()[m], coord[m]).size;
  }
  return s;
}

std::vector<int64_t> DTensorSpec::local_offset_at(const std::vector<int64_t>& coord) const {
  std::vector<int64_t> size = shape, off(shape.size(), 0);
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    const int64_t d = placements[m].dim;
    auto r = chunk_range(size[d], mesh.shape().sizes()[m], coord[m]);
    off[d] += r.offset;
    size[d] = r.size;
  }
  return off;
}

std::vector<int64_t> DTensorSpec::local_shape() const { return local_shape_at(mesh.coordinate()); }
std::vector<int64_t> DTensorSpec::local_offset() const {
  return local_offset_at(mesh.coordinate());
}

bool DTensorSpec::is_replicated() const {
  for (auto& p : placements)
    if (!p.is_replicate()) return false;
  return true;
}

bool DTensorSpec::has_partial() const {
  for (auto& p : placements)
    if (p.is_partial()) return true;
  return false;
}

std::vector<int64_t> DTensorSpec::mesh_dims_sharding(int64_t d) const {
  std::vector<int64_t> out;
  for (size_t m = 0; m < placements.size(); ++m)
    if (placements[m].is_shard(d)) out.push_back(static_cast<int64_t>(m));
  return out;
}

std::string DTensorSpec::to_string() const {
  return "DTensorSpec(" + dtensor::to_string(placements) +
         ", shape=" + c10::str(c10::IntArrayRef(shape)) + ", " + c10::toString(dtype) + ")";
}

}  // namespace vescale::dtensor
