#include "vescale/dtensor/placement.h"

#include <cctype>
#include <optional>
#include <ostream>

#include "vescale/common/check.h"

namespace vescale::dtensor {

std::string Placement::to_string() const {
  switch (kind) {
    case Kind::Replicate:
      return "Replicate";
    case Kind::Shard:
      return "Shard(" + std::to_string(dim) + ")";
    case Kind::Partial:
      return std::string("Partial(") + dist::to_string(reduce) + ")";
  }
  return "?";
}

Placement Placement::parse(const std::string& raw) {
  std::string t;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  auto arg = [&](const std::string& head) -> std::optional<std::string> {
    if (t.rfind(head + "(", 0) != 0 || t.back() != ')') return std::nullopt;
    return t.substr(head.size() + 1, t.size() - head.size() - 2);
  };
  const std::string hint = "; use Shard(d), Replicate, or Partial(sum|avg|max|min)";
  if (t == "Replicate" || t == "Replicate()") return replicate();
  if (t == "Partial" || t == "Partial()") return partial();
  if (auto a = arg("Shard")) {
    int64_t d = 0;
    size_t used = 0;
    try {
      d = std::stoll(*a, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    VESCALE_CHECK(!a->empty() && used == a->size(), "placement '", raw,
                  "': Shard needs an integer dim", hint);
    return shard(d);
  }
  if (auto a = arg("Partial")) {
    for (auto op :
         {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max, dist::ReduceOp::Min})
      if (*a == dist::to_string(op)) return partial(op);
    VESCALE_FAIL("placement '", raw, "': unknown reduce op '", *a, "'", hint);
  }
  VESCALE_FAIL("placement '", raw, "' is not a placement", hint);
}

std::string to_string(const Placements& p) {
  std::string s = "[";
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + p[i].to_string();
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << p.to_string(); }

}  // namespace vescale::dtensor
