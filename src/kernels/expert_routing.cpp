// Grouping assignments by expert and combining outputs by token (vescale/kernels/expert_routing.h).
#include "vescale/kernels/expert_routing.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "vescale/common/check.h"

namespace vescale::kernels {

ExpertGroups group_by_expert(const at::Tensor& expert_ids, int64_t n_experts) {
  VESCALE_CHECK(expert_ids.dim() == 2, "group_by_expert: expert ids must be [tokens, k], got ",
                expert_ids.sizes());
  auto flat = expert_ids.reshape({-1});
  ExpertGroups g;
  // Stable: inside a group the assignments keep token order, which capacity drops rely on.
  g.order = std::get<1>(flat.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0));
  auto counts = at::bincount(flat, {}, n_experts).to(at::kCPU).to(at::kLong).contiguous();
  VESCALE_CHECK(counts.numel() == n_experts, "group_by_expert: an expert id is >= n_experts (",
                n_experts, ")");
  g.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + n_experts);
  return g;
}

int64_t expert_capacity(double capacity_factor, int64_t tokens, int64_t top_k, int64_t n_experts) {
  VESCALE_CHECK(capacity_factor > 0, "expert_capacity: the capacity factor must be > 0");
  return static_cast<int64_t>(std::ceil(capacity_factor * static_cast<double>(tokens * top_k) /
                                        static_cast<double>(n_experts)));
}

ExpertGroups within_capacity(const ExpertGroups& groups, int64_t capacity,
                             const std::vector<int64_t>& before) {
  const size_t E = groups.counts.size();
  VESCALE_CHECK(before.empty() || before.size() == E, "within_capacity: ", before.size(),
                " earlier counts for ", E, " experts");
  ExpertGroups kept;
  kept.counts.resize(E);
  std::vector<at::Tensor> parts;
  int64_t start = 0;
  for (size_t e = 0; e < E; ++e) {
    const int64_t queued = before.empty() ? 0 : before[e];
    const int64_t keep = std::clamp<int64_t>(capacity - queued, 0, groups.counts[e]);
    kept.counts[e] = keep;
    if (keep > 0) parts.push_back(groups.order.narrow(0, start, keep));
    start += groups.counts[e];
  }
  kept.order = parts.empty() ? groups.order.narrow(0, 0, 0) : at::cat(parts);
  return kept;
}

at::Tensor combine_by_token(const at::Tensor& y_grouped, const at::Tensor& order,
                            const at::Tensor& gates) {
  const int64_t N = gates.size(0), k = gates.size(1), d = y_grouped.size(1);
  // Each assignment's row back at token * k + choice (unique targets: no accumulation), zero for
  // dropped ones; then the k choices summed in order.
  auto by_assignment = y_grouped.new_zeros({N * k, d}).index_copy(0, order, y_grouped);
  return (by_assignment.view({N, k, d}) * gates.unsqueeze(-1).to(y_grouped.scalar_type())).sum(1);
}

}  // namespace vescale::kernels
