// DeviceMesh: the world's ranks laid out as an N-D grid with named dims, row-major
// (rank = sum coord[i] * stride[i]), with one process group per dim and per set of dims.
// The per-set groups serve fused N-D collectives (one reduction over dp and tp at once).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vescale/dist/process_group.h"

namespace vescale::mesh {

using MeshDims = std::vector<std::pair<std::string, int64_t>>;

// The grid alone: names, sizes, and rank <-> coordinate maps. No communication.
class MeshShape {
 public:
  // At most one size may be -1: it takes what is left of world_size.
  // Throws when names repeat or are empty, a size is < 1, or the product isn't world_size.
  MeshShape(const MeshDims& dims, int64_t world_size);

  int64_t ndim() const { return static_cast<int64_t>(names_.size()); }
  int64_t numel() const;
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t size(const std::string& dim) const { return sizes_[index(dim)]; }
  // Position of `dim` in names(); throws naming the known dims if it's absent.
  int64_t index(const std::string& dim) const;

  std::vector<int64_t> coordinate(int64_t rank) const;
  int64_t rank_at(const std::vector<int64_t>& coord) const;
  // The ranks that share `rank`'s coordinates outside `dims` (a bitmask over dims), in
  // row-major order of the coordinates inside `dims`: the members of its group for that dim set.
  std::vector<int> group_ranks(int64_t rank, uint32_t dims) const;
  // Which of the groups for `dims` holds `rank` (row-major over the other dims).
  int64_t group_index(int64_t rank, uint32_t dims) const;
  // "dp,tp" for a bitmask.
  std::string dims_label(uint32_t dims) const;

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> sizes_;
};

class DeviceMesh {
 public:
  // Collective over the world (dist::init must have run): every rank builds its groups for
  // every non-empty set of dims, in the same order.
  static DeviceMesh init(const MeshDims& dims);

  // The mesh over `dims` (some of this mesh's, listed in its order) that holds this rank, e.g.
  // a pipeline stage's {dp, tp} out of {pp, dp, tp}. It reuses this mesh's groups: not
  // collective, no new communicators. No dims: this process alone, as a 1-rank mesh with one
  // dim "stage" (a group of one).
  DeviceMesh submesh(const std::vector<std::string>& dims) const;
  // The same ranks with the adjacent dims `dims` (in this mesh's order) joined into one dim
  // `name` of their sizes' product, coordinates row-major over them, e.g. {dp, cp, tp} with
  // dp and cp joined as dp: the mesh a context-parallel model is laid out on. It reuses this
  // mesh's groups: not collective, no new communicators.
  DeviceMesh join(const std::vector<std::string>& dims, const std::string& name) const;
  // The world rank of the rank at `mesh_rank` of this mesh (itself for a mesh over the world).
  int world_rank(int64_t mesh_rank) const;

  const MeshShape& shape() const;
  int64_t ndim() const { return shape().ndim(); }
  int64_t size() const { return shape().numel(); }
  int64_t size(const std::string& dim) const { return shape().size(dim); }
  const std::vector<std::string>& dim_names() const { return shape().names(); }

  int rank() const;  // global rank of this process
  const std::vector<int64_t>& coordinate() const;
  int64_t coordinate(const std::string& dim) const;
  // "cpu" or "cuda".
  const std::string& device_type() const;

  // This rank's group along one dim, or over a set of dims (in any order; for fused N-D
  // collectives).
  dist::ProcessGroup& group(const std::string& dim) const;
  dist::ProcessGroup& group_over(const std::vector<std::string>& dims) const;

  std::string to_string() const;  // "DeviceMesh(dp=2, tp=2; rank 3 at [1, 1])"

  // Meshes compare by identity: two init() calls make two meshes, even with equal shapes.
  bool valid() const { return impl_ != nullptr; }
  const void* id() const { return impl_.get(); }
  bool operator==(const DeviceMesh& o) const { return impl_ == o.impl_; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace vescale::mesh
