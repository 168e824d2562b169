#include "vescale/dtensor/tensor_box.h"

#include <algorithm>

#include "vescale/common/check.h"

namespace vescale::dtensor {

namespace {
// The boxes of [begin, end) inside the sub-tensor at `prefix` (its first prefix.size() indices
// fixed).
void boxes_of(const std::vector<int64_t>& shape, std::vector<int64_t> prefix, int64_t begin,
              int64_t end, int64_t base, std::vector<FlatBox>& out) {
  if (begin >= end) return;
  const size_t dim = prefix.size(), n = shape.size();
  auto box = [&](int64_t row, int64_t rows, int64_t flat) {
    FlatBox b;
    b.offsets = prefix;
    b.offsets.push_back(row);
    b.shape.assign(dim, 1);
    b.shape.push_back(rows);
    for (size_t d = dim + 1; d < n; ++d) b.offsets.push_back(0), b.shape.push_back(shape[d]);
    b.flat_begin = flat;
    out.push_back(std::move(b));
  };
  if (dim + 1 == n) return box(begin, end - begin, base + begin);
  int64_t inner = 1;
  for (size_t d = dim + 1; d < n; ++d) inner *= shape[d];
  int64_t r0 = begin / inner;
  const int64_t r1 = end / inner;
  if (begin % inner != 0) {  // the head: part of row r0
    const int64_t e = std::min(end, (r0 + 1) * inner);
    auto p = prefix;
    p.push_back(r0);
    boxes_of(shape, p, begin - r0 * inner, e - r0 * inner, base + r0 * inner, out);
    if (e == end) return;
    ++r0;
  }
  if (r1 > r0) box(r0, r1 - r0, base + r0 * inner);  // whole rows
  if (end % inner != 0) {                            // the tail: the start of row r1
    auto p = prefix;
    p.push_back(r1);
    boxes_of(shape, p, 0, end - r1 * inner, base + r1 * inner, out);
  }
}
}  // namespace

std::vector<FlatBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                      int64_t end) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  VESCALE_CHECK(0 <= begin && begin <= end && end <= numel, "flat_range_boxes: [", begin, ", ", end,
                ") is not inside a tensor of ", numel, " elements");
  std::vector<FlatBox> out;
  if (shape.empty()) {
    if (end > begin) out.push_back(FlatBox{{}, {}, 0});
    return out;
  }
  boxes_of(shape, {}, begin, end, 0, out);
  return out;
}

}  // namespace vescale::dtensor
