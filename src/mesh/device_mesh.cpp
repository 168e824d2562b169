#include "vescale/mesh/device_mesh.h"

#include <set>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"

namespace vescale::mesh {

// ---- MeshShape ---------------------------------------------------------------------------

namespace {
std::string render(const MeshDims& dims) {
  std::string s;
  for (auto& [n, v] : dims) s += (s.empty() ? "" : " x ") + n + "=" + std::to_string(v);
  return s.empty() ? "(no dims)" : s;
}
}  // namespace

MeshShape::MeshShape(const MeshDims& dims, int64_t world_size) {
  VESCALE_CHECK(!dims.empty(), "mesh: no dims given; use e.g. {{\"dp\", ", world_size, "}}");
  VESCALE_CHECK(dims.size() <= 16, "mesh: ", dims.size(), " dims is too many (at most 16)");
  std::set<std::string> seen;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    auto& [name, size] = dims[i];
    VESCALE_CHECK(!name.empty(), "mesh ", render(dims), ": dim ", i, " has an empty name");
    VESCALE_CHECK(seen.insert(name).second, "mesh ", render(dims), ": dim name '", name,
                  "' repeats; give each dim its own name");
    if (size == -1) {
      VESCALE_CHECK(inferred < 0, "mesh ", render(dims), ": only one dim may be -1 (inferred)");
      inferred = static_cast<int>(i);
    } else {
      VESCALE_CHECK(size >= 1, "mesh ", render(dims), ": dim '", name, "' has size ", size,
                    "; sizes must be >= 1 (or -1 to infer one dim)");
      known *= size;
    }
    names_.push_back(name);
    sizes_.push_back(size);
  }
  if (inferred >= 0) {
    VESCALE_CHECK(world_size % known == 0, "mesh ", render(dims), ": cannot infer '",
                  names_[inferred], "': the other dims multiply to ", known,
                  ", which does not divide the world size ", world_size);
    sizes_[inferred] = world_size / known;
  }
  VESCALE_CHECK(
      numel() == world_size, "mesh ", render(dims), " has ", numel(), " devices but the world has ",
      world_size,
      " ranks; make the product of the dim sizes equal WORLD_SIZE (or set one dim to -1)");
}

int64_t MeshShape::numel() const {
  int64_t n = 1;
  for (auto s : sizes_) n *= s;
  return n;
}

int64_t MeshShape::index(const std::string& dim) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == dim) return static_cast<int64_t>(i);
  std::string known;
  for (auto& n : names_) known += (known.empty() ? "" : ", ") + n;
  VESCALE_FAIL("mesh: no dim named '", dim, "'; this mesh has dims [", known, "]");
}

std::vector<int64_t> MeshShape::coordinate(int64_t rank) const {
  VESCALE_CHECK(rank >= 0 && rank < numel(), "mesh: rank ", rank, " is outside the mesh of ",
                numel());
  std::vector<int64_t> c(sizes_.size());
  for (int64_t i = ndim() - 1; i >= 0; --i) {
    c[i] = rank % sizes_[i];
    rank /= sizes_[i];
  }
  return c;
}

int64_t MeshShape::rank_at(const std::vector<int64_t>& coord) const {
  VESCALE_CHECK(static_cast<int64_t>(coord.size()) == ndim(), "mesh: coordinate has ", coord.size(),
                " entries for a ", ndim(), "-D mesh");
  int64_t r = 0;
  for (int64_t i = 0; i < ndim(); ++i) {
    VESCALE_CHECK(coord[i] >= 0 && coord[i] < sizes_[i], "mesh: coordinate ", coord[i], " on dim '",
                  names_[i], "' is outside [0, ", sizes_[i], ")");
    r = r * sizes_[i] + coord[i];
  }
  return r;
}

std::vector<int> MeshShape::group_ranks(int64_t rank, uint32_t dims) const {
  // Walk every coordinate of the dims in the set (row-major), keeping the others fixed.
  auto base = coordinate(rank);
  std::vector<int64_t> free_dims;
  for (int64_t i = 0; i < ndim(); ++i)
    if (dims & (1u << i)) free_dims.push_back(i);
  std::vector<int> out;
  std::vector<int64_t> c = base;
  for (auto d : free_dims) c[d] = 0;
  while (true) {
    out.push_back(static_cast<int>(rank_at(c)));
    int64_t k = static_cast<int64_t>(free_dims.size()) - 1;
    for (; k >= 0; --k) {
      auto d = free_dims[k];
      if (++c[d] < sizes_[d]) break;
      c[d] = 0;
    }
    if (k < 0) break;
  }
  return out;
}

int64_t MeshShape::group_index(int64_t rank, uint32_t dims) const {
  auto c = coordinate(rank);
  int64_t idx = 0;
  for (int64_t i = 0; i < ndim(); ++i)
    if (!(dims & (1u << i))) idx = idx * sizes_[i] + c[i];
  return idx;
}

std::string MeshShape::dims_label(uint32_t dims) const {
  std::string s;
  for (int64_t i = 0; i < ndim(); ++i)
    if (dims & (1u << i)) s += (s.empty() ? "" : ",") + names_[i];
  return s;
}

// ---- DeviceMesh --------------------------------------------------------------------------

struct DeviceMesh::Impl {
  MeshShape shape;
  int rank = 0;
  std::vector<int64_t> coord;
  std::string device_type;
  std::vector<dist::ProcessGroup> groups;  // indexed by dim bitmask (index 0 unused)
  std::vector<int> world_ranks;            // mesh rank -> world rank; empty: the same
};

DeviceMesh DeviceMesh::init(const MeshDims& dims) {
  // Meshes are numbered in creation order, the same on every rank, so their keys never clash.
  static int next_id = 0;
  const int id = next_id++;
  const int world = dist::world_size();
  auto impl = std::shared_ptr<Impl>(
      new Impl{MeshShape(dims, world), dist::rank(), {}, dist::device_type(), {}, {}});
  impl->coord = impl->shape.coordinate(impl->rank);
  const uint32_t all = (1u << impl->shape.ndim()) - 1;
  impl->groups.resize(all + 1);
  for (uint32_t set = 1; set <= all; ++set) {
    auto members = impl->shape.group_ranks(impl->rank, set);
    if (static_cast<int>(members.size()) == world) {
      impl->groups[set] = dist::world();  // the full mesh is the world: reuse its connections
      continue;
    }
    std::string key = "mesh" + std::to_string(id) + "/" + impl->shape.dims_label(set) + "/" +
                      std::to_string(impl->shape.group_index(impl->rank, set));
    impl->groups[set] = dist::new_group(key, members);
  }
  DeviceMesh m;
  m.impl_ = std::move(impl);
  log::debug("mesh: " + m.to_string());
  return m;
}

DeviceMesh DeviceMesh::submesh(const std::vector<std::string>& dims) const {
  const MeshShape& s = shape();
  if (dims.empty()) {
    // No dims left (a pure pipeline's stage): this process alone, as a 1-rank dim "stage".
    static int next_self = 0;
    auto impl = std::shared_ptr<Impl>(new Impl{MeshShape({{"stage", 1}}, 1), impl_->rank, {0},
                                               impl_->device_type, {}, {impl_->rank}});
    impl->groups.resize(2);
    impl->groups[1] = dist::new_group("self" + std::to_string(next_self++) + "/" +
                                          std::to_string(impl_->rank),
                                      {impl_->rank});
    DeviceMesh m;
    m.impl_ = std::move(impl);
    return m;
  }
  uint32_t set = 0;
  MeshDims sub;
  int64_t last = -1;
  for (auto& d : dims) {
    const int64_t i = s.index(d);
    VESCALE_CHECK(i > last, "mesh: submesh dims must be distinct and in the mesh's order ",
                  to_string(), "; got '", d, "' out of place");
    last = i;
    set |= 1u << i;
    sub.emplace_back(d, s.sizes()[i]);
  }
  int64_t n = 1;
  for (auto& [name, size] : sub) n *= size;
  auto impl = std::shared_ptr<Impl>(new Impl{MeshShape(sub, n), impl_->rank, {},
                                             impl_->device_type, {}, {}});
  for (size_t k = 0; k < dims.size(); ++k) impl->coord.push_back(coordinate(dims[k]));
  // Sub-bitmask -> this mesh's bitmask over the same dims.
  const uint32_t all = (1u << sub.size()) - 1;
  impl->groups.resize(all + 1);
  for (uint32_t m = 1; m <= all; ++m) {
    uint32_t parent = 0;
    for (size_t k = 0; k < dims.size(); ++k)
      if (m & (1u << k)) parent |= 1u << s.index(dims[k]);
    impl->groups[m] = impl_->groups[parent];
  }
  impl->world_ranks = impl_->groups[set].global_ranks();  // world ranks, ascending = row-major
  DeviceMesh m;
  m.impl_ = std::move(impl);
  return m;
}

DeviceMesh DeviceMesh::join(const std::vector<std::string>& dims, const std::string& name) const {
  const MeshShape& s = shape();
  VESCALE_CHECK(!dims.empty(), "mesh: join() needs at least one dim name");
  const int64_t first = s.index(dims[0]);
  for (size_t k = 1; k < dims.size(); ++k)
    VESCALE_CHECK(s.index(dims[k]) == first + static_cast<int64_t>(k),
                  "mesh: join() takes adjacent dims in ", to_string(), "'s order; '", dims[k],
                  "' does not follow '", dims[k - 1], "'");
  const int64_t last = first + static_cast<int64_t>(dims.size()) - 1;
  // Each new dim's bitmask over this mesh's dims, its size and this rank's coordinate.
  MeshDims joined;
  std::vector<uint32_t> parent_bits;
  std::vector<int64_t> coord;
  for (int64_t i = 0; i < s.ndim(); ++i) {
    if (i > first && i <= last) {
      joined.back().second *= s.sizes()[i];
      parent_bits.back() |= 1u << i;
      coord.back() = coord.back() * s.sizes()[i] + impl_->coord[i];
      continue;
    }
    joined.emplace_back(i == first ? name : s.names()[i], s.sizes()[i]);
    parent_bits.push_back(1u << i);
    coord.push_back(impl_->coord[i]);
  }
  auto impl = std::shared_ptr<Impl>(new Impl{MeshShape(joined, s.numel()),
                                             impl_->rank,
                                             coord,
                                             impl_->device_type,
                                             {},
                                             impl_->world_ranks});
  const uint32_t all = (1u << joined.size()) - 1;
  impl->groups.resize(all + 1);
  for (uint32_t m = 1; m <= all; ++m) {
    uint32_t parent = 0;
    for (size_t k = 0; k < joined.size(); ++k)
      if (m & (1u << k)) parent |= parent_bits[k];
    impl->groups[m] = impl_->groups[parent];
  }
  DeviceMesh m;
  m.impl_ = std::move(impl);
  return m;
}

int DeviceMesh::world_rank(int64_t mesh_rank) const {
  VESCALE_CHECK(mesh_rank >= 0 && mesh_rank < size(), "mesh: rank ", mesh_rank,
                " is outside ", to_string());
  return impl_->world_ranks.empty() ? static_cast<int>(mesh_rank)
                                    : impl_->world_ranks[mesh_rank];
}

const MeshShape& DeviceMesh::shape() const {
  VESCALE_CHECK(impl_, "mesh: this DeviceMesh is empty; create it with DeviceMesh::init");
  return impl_->shape;
}
int DeviceMesh::rank() const { return impl_->rank; }
const std::vector<int64_t>& DeviceMesh::coordinate() const { return impl_->coord; }
int64_t DeviceMesh::coordinate(const std::string& dim) const {
  return impl_->coord[shape().index(dim)];
}
const std::string& DeviceMesh::device_type() const { return impl_->device_type; }

dist::ProcessGroup& DeviceMesh::group(const std::string& dim) const {
  return impl_->groups[1u << shape().index(dim)];
}

dist::ProcessGroup& DeviceMesh::group_over(const std::vector<std::string>& dims) const {
  VESCALE_CHECK(!dims.empty(), "mesh: group_over() needs at least one dim name");
  uint32_t set = 0;
  for (auto& d : dims) {
    uint32_t bit = 1u << shape().index(d);
    VESCALE_CHECK(!(set & bit), "mesh: dim '", d, "' is named twice in group_over()");
    set |= bit;
  }
  return impl_->groups[set];
}

std::string DeviceMesh::to_string() const {
  auto& s = shape();
  std::string out = "DeviceMesh(";
  for (int64_t i = 0; i < s.ndim(); ++i)
    out += (i ? ", " : "") + s.names()[i] + "=" + std::to_string(s.sizes()[i]);
  out += "; rank " + std::to_string(rank()) + " at [";
  for (size_t i = 0; i < impl_->coord.size(); ++i)
    out += (i ? ", " : "") + std::to_string(impl_->coord[i]);
  return out + "])";
}

}  // namespace vescale::mesh
