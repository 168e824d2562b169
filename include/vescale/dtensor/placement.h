// How a tensor lies along one mesh dim: Shard(d) (split along tensor dim d, torch.chunk style),
// Replicate (a full copy on every rank), or Partial(op) (every rank holds a term; the value is
// their reduction).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "vescale/dist/reduce_op.h"

namespace vescale::dtensor {

struct Placement {
  enum class Kind : uint8_t { Replicate, Shard, Partial };
  Kind kind = Kind::Replicate;
  int64_t dim = 0;                              // Shard only
  dist::ReduceOp reduce = dist::ReduceOp::Sum;  // Partial only

  static Placement replicate() { return {}; }
  static Placement shard(int64_t dim) { return {Kind::Shard, dim, dist::ReduceOp::Sum}; }
  static Placement partial(dist::ReduceOp op = dist::ReduceOp::Sum) {
    return {Kind::Partial, 0, op};
  }

  bool is_replicate() const { return kind == Kind::Replicate; }
  bool is_shard() const { return kind == Kind::Shard; }
  bool is_shard(int64_t d) const { return kind == Kind::Shard && dim == d; }
  bool is_partial() const { return kind == Kind::Partial; }

  bool operator==(const Placement& o) const {
    return kind == o.kind && (kind != Kind::Shard || dim == o.dim) &&
           (kind != Kind::Partial || reduce == o.reduce);
  }
  bool operator!=(const Placement& o) const { return !(*this == o); }

  // "Shard(0)", "Replicate", "Partial(sum)".
  std::string to_string() const;
  // Parses the forms above; "Partial" alone means Partial(sum). Throws naming the text.
  static Placement parse(const std::string& text);
};

using Placements = std::vector<Placement>;

std::string to_string(const Placements& p);  // "[Replicate, Shard(0)]"
std::ostream& operator<<(std::ostream& os, const Placement& p);

// Shorthands for code and tests: Shard(0), Replicate(), Partial().
inline Placement Shard(int64_t dim) { return Placement::shard(dim); }
inline Placement Replicate() { return Placement::replicate(); }
inline Placement Partial(dist::ReduceOp op = dist::ReduceOp::Sum) { return Placement::partial(op); }

}  // namespace vescale::dtensor
