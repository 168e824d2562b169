// The mixture-of-experts options Mixtral and Qwen3-MoE share: plain values, no libtorch (the
// train config reads them as model.* fields through the registry), and their JSON fields.
#pragma once
#include <cstdint>
#include <string>

#include "vescale/models/shared/options_impl.h"

namespace vescale::models {

struct MoEOptions {
  int64_t n_experts = 8;
  int64_t top_k = 2;
  // Renormalize the chosen experts' probabilities to sum to 1 (Mixtral always; Qwen3-MoE's
  // norm_topk_prob). Off: the gates are the softmax over all experts, as chosen.
  bool normalize_top_k = true;
  double aux_loss_coef = 0.02;    // weight of the load-balancing loss the trainer adds
  double router_z_loss_coef = 0;  // weight of the router z-loss (ST-MoE), summed over layers
  // 0: dropless. Otherwise each expert takes at most ceil(capacity_factor * tokens * top_k /
  // n_experts) of a forward's assignments, in token order; the rest are dropped (docs/moe.md).
  double capacity_factor = 0;
  // Aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the router's scores for
  // the choice of experts only (not the gates), moved by this much per optimizer step towards
  // balance: bias_e += rate * sign(mean load - load_e). 0: off.
  double expert_bias_rate = 0;
};

// The model.* fields of MoEOptions; `normalize_top_k` only where the family lets it change.
template <class V>
void visit_moe(V& v, MoEOptions& c, bool with_normalize) {
  v.field("n_experts", c.n_experts);
  v.field("top_k", c.top_k);
  if (with_normalize) v.field("normalize_top_k", c.normalize_top_k);
  v.field("aux_loss_coef", c.aux_loss_coef);
  v.field("router_z_loss_coef", c.router_z_loss_coef);
  v.field("capacity_factor", c.capacity_factor);
  v.field("expert_bias_rate", c.expert_bias_rate);
}

inline void validate_moe(const ModelOptions::Fail& fail, const MoEOptions& c) {
  check_positive(fail, "n_experts", c.n_experts);
  if (!(c.top_k >= 1 && c.top_k <= c.n_experts))
    fail("top_k", "must be in [1, n_experts = " + std::to_string(c.n_experts) + "], got " +
                      std::to_string(c.top_k));
  if (!(c.aux_loss_coef >= 0)) fail("aux_loss_coef", "must be >= 0");
  if (!(c.router_z_loss_coef >= 0)) fail("router_z_loss_coef", "must be >= 0");
  if (!(c.capacity_factor >= 0))
    fail("capacity_factor", "must be >= 0 (0: dropless; e.g. 1.25 drops beyond 125% of even)");
  if (!(c.expert_bias_rate >= 0))
    fail("expert_bias_rate", "must be >= 0 (0: off; DeepSeek-V3 used 0.001)");
}

}  // namespace vescale::models
