#include "dtensor/rules/rule_utils.h"
#include "vescale/common/check.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "vescale/common/check.h"

namespace vescale::dtensor::rules {

std::vector<int64_t> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t nd = 0;
  for (auto& s : shapes) nd = std::max(nd, s.size());
  std::vector<int64_t> out(nd, 1);
  for (auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      auto& o = out[nd - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  VESCALE_CHECK(dim >= -n && dim < n, "DTensor: dim ", dim, " is out of range for a ", ndim,
                "-D tensor");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> reduce_dims(const c10::IValue& v, int64_t ndim) {
  std::vector<int64_t> dims;
  if (!v.isNone()) {
    if (v.isInt())
      dims.push_back(v.toInt());
    else
      dims = v.toIntVector();
  }
  if (dims.empty())
    for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
  for (auto& d : dims) d = wrap_dim(d, ndim);
  return dims;
}

std::vector<int64_t> local_shape(const mesh::DeviceMesh& mesh, const Placements& placements,
                                 const std::vector<int64_t>& shape) {
  DTensorSpec s{mesh, placements, shape, c10::ScalarType::Float};
  return s.local_shape();
}

double redistribute_cost(const DTensorSpec& spec, const Placement& have, const Placement& want) {
  if (have == want) return 0;
  const double n = static_cast<double>(c10::multiply_integers(spec.shape));
  if (have.is_replicate()) return 0;                       // slicing, or zeroing for Partial
  if (have.is_shard() && want.is_shard()) return 0.5 * n;  // all-to-all
  if (have.is_shard()) return n;                           // all-gather
  if (want.is_shard()) return n;                           // reduce-scatter
  return 2 * n;                                            // all-reduce
}

std::function<void(torch::jit::Stack&)> run_with_sizes(const c10::OperatorHandle& op, size_t n_args,
                                                       size_t arg_index,
                                                       std::vector<int64_t> sizes) {
  return [op, n_args, arg_index, sizes](torch::jit::Stack& stack) {
    stack[stack.size() - n_args + arg_index] = c10::IValue(sizes);
    op.callBoxed(stack);
  };
}

}  // namespace vescale::dtensor::rules
