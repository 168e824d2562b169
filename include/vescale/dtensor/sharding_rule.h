// The sharding rule API: how a layer above dtensor (random/, kernels of later work) teaches the
// DTensor dispatcher an op. A rule looks at an op call's input specs and arguments and says which
// placements the inputs must have and which the outputs then get (docs/dtensor.md).
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <string>
#include <vector>

#include "vescale/dtensor/dtensor_spec.h"

namespace vescale::dtensor {

struct OpCall {
  const c10::OperatorHandle& op;
  const std::string& name;                // "aten::mm" or "aten::add.Tensor"
  const std::vector<DTensorSpec>& specs;  // every tensor input, flattened in argument order
  const std::vector<size_t>& spec_arg;    // which schema argument each spec came from
  c10::ArrayRef<c10::IValue> args;        // the call's arguments (tensors still as given)

  int64_t mesh_ndim() const { return specs.empty() ? 0 : specs[0].mesh.ndim(); }
  // The argument at schema position `i`, or by name.
  const c10::IValue& arg(size_t i) const { return args[i]; }
  const c10::IValue& arg(const char* name) const;
  bool has_arg(const char* name) const;
  // Index into `specs` of the tensor at schema position `i`, or -1.
  int64_t spec_index(size_t arg_index) const;
  bool is_inplace() const;   // mutates its first argument (add_, copy_, fill_, ...)
  size_t n_outputs() const;  // tensor returns (a Tensor[] counts once)
};

// What a rule decides.
struct Strategy {
  std::vector<Placements> inputs;   // one per entry of OpCall::specs
  std::vector<Placements> outputs;  // one per tensor return (a Tensor[] return: for every element)
  // Global output shapes, when the rule knows them (else a meta run finds them, or, for
  // Replicate outputs, the local result's shape is the global one).
  std::vector<std::vector<int64_t>> output_shapes;
  // For ops returning one Tensor[] whose elements differ (_foreach_*): per-element placements
  // and global shapes. Leave `outputs` with one entry; these take precedence.
  std::vector<Placements> element_outputs;
  std::vector<std::vector<int64_t>> element_shapes;
  // When set, runs instead of the op on the local tensors (e.g. a mean over a sharded dim is a
  // local sum divided by the global count). Gets the stack with local tensors; leaves the returns.
  std::function<void(torch::jit::Stack&)> local_fn;
  // Dimension permutations (t, transpose, permute): output dim i is input dim dims_from[i]. The
  // output's global strides are then the input's, permuted, as for a plain tensor: autograd's
  // layout-aware formulas read them (mm's backward gives a transposed weight's gradient in the
  // weight's own layout). Global strides only, so every rank takes the same formula.
  std::vector<int64_t> dims_from;
};

using Rule = std::function<Strategy(const OpCall&)>;

// Placements the rules share.
Placements replicate_all(int64_t mesh_ndim);
// x's placements with Partial, and shards of dims >= `from_dim`, made Replicate: what an op that
// is independent along dims [0, from_dim) takes (attention by batch and heads: 2; a norm over
// the last dim: ndim - 1; elementwise: ndim).
Placements shards_below(const DTensorSpec& x, int64_t from_dim);
// Partial over every mesh dim where `p` shards: a sum over the sharded rows (weight gradients).
Placements partial_where_sharded(const Placements& p);

struct RuleOptions {
  // Take the rule even when every input is Replicate. Without it such calls skip the rule
  // (replicated in, replicated out, the op run as it is). For rules that do more than choose
  // placements: views whose shard may need a reshape, permutations that give strides, ops whose
  // local_fn is the computation.
  bool even_when_replicated = false;
};

// Registers `rule` for op names (with overload, or "ns::name" for every overload), e.g.
// "aten::mm", "aten::add.Tensor", "vescale::causal_attention_forward".
void register_rule(const std::string& name, Rule rule, RuleOptions options = {});

}  // namespace vescale::dtensor
