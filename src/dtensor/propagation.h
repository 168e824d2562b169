// Internal: sharding propagation, the lookup of rules (public API: vescale/dtensor/sharding_rule.h)
// by op name ("aten::mm", "aten::add.Tensor") or by tag (pointwise), and the built-in rules.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vescale/dtensor/dtensor_spec.h"
#include "vescale/dtensor/sharding_rule.h"

namespace vescale::dtensor {

// The number of Tensor and Tensor[] returns of an op: the entries of Strategy::outputs.
size_t tensor_return_count(const c10::FunctionSchema& schema);

struct RegisteredRule {
  Rule rule;
  RuleOptions options;
};
// The rule for a call, or null if none applies.
const RegisteredRule* find_rule(const c10::OperatorHandle& op, const std::string& name);

// Strategies for the common shapes of rules, shared by the rule files.
Strategy all_replicate(const OpCall& call, size_t n_outputs);

// Registration hooks of the rule files (called once by the backend).
void register_pointwise_rules();
void register_matmul_rules();
void register_reduction_rules();
void register_view_rules();
void register_tensor_rules();   // factories, *_like, clone, copy_, fill_, detach, ...
void register_softmax_rules();  // softmax, log_softmax, nll_loss (vocab-parallel cross-entropy)
void register_embedding_rules();
void register_norm_rules();       // layer_norm, linalg_vector_norm
void register_index_rules();      // gather, index_select, topk, sort, stack, tril, triu
void register_foreach_rules();    // _foreach_* (optimizer updates)
void register_attention_rules();  // fused scaled_dot_product_attention

}  // namespace vescale::dtensor
