// DTensorSpec: what a DTensor is, globally: its mesh, one placement per mesh dim, and its
// global shape and dtype. Local shapes and offsets follow torch.chunk: along a sharded dim of
// size n over k ranks every rank gets ceil(n/k) rows but the last ones, which may get fewer or
// none. A tensor dim sharded over several mesh dims is split by the first, then each piece by the
// next.
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "vescale/dtensor/placement.h"
#include "vescale/mesh/device_mesh.h"

namespace vescale::dtensor {

// The [offset, offset + size) that chunk `index` of `count` covers in a dim of `size` rows.
struct ChunkRange {
  int64_t offset = 0;
  int64_t size = 0;
};
ChunkRange chunk_range(int64_t dim_size, int64_t count, int64_t index);

struct DTensorSpec {
  mesh::DeviceMesh mesh;
  Placements placements;       // one per mesh dim
  std::vector<int64_t> shape;  // global
  c10::ScalarType dtype = c10::ScalarType::Float;

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  // Normalizes negative Shard dims and checks placements against the mesh and the shape.
  void validate_and_normalize();

  // This rank's local shape and its offset in the global tensor.
  std::vector<int64_t> local_shape() const;
  std::vector<int64_t> local_offset() const;
  // The same for any mesh coordinate.
  std::vector<int64_t> local_shape_at(const std::vector<int64_t>& coord) const;
  std::vector<int64_t> local_offset_at(const std::vector<int64_t>& coord) const;

  bool is_replicated() const;  // Replicate on every mesh dim
  bool has_partial() const;
  // Mesh dims that shard tensor dim `d`, in mesh-dim order.
  std::vector<int64_t> mesh_dims_sharding(int64_t d) const;

  bool operator==(const DTensorSpec& o) const {
    return mesh == o.mesh && placements == o.placements && shape == o.shape && dtype == o.dtype;
  }
  std::string to_string() const;  // "DTensorSpec([Replicate, Shard(0)], shape=[8, 4], Float)"
};

}  // namespace vescale::dtensor
