// Sharding plans (docs/plan.md): which placements each parameter gets, by FQN pattern, and how
// module inputs and outputs are resharded. Loaded from JSON or built in C++; the model never
// sees it. This file covers parsing, matching and validation; parallelize() applies it.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "vescale/dtensor/placement.h"
#include "vescale/plan/context_spec.h"
#include "vescale/plan/schedule_kind.h"

namespace vescale::plan {

// FQN patterns: `*` matches any run of characters (dots too), `?` one character, `[abc]` one
// of a set (`[a-z]` ranges). A pattern starting with "re:" is an ECMAScript regex over the
// whole name, matched in polynomial time: at most 512 characters, no back-references, and
// repeat counts ({m,n}) small enough to keep the automaton under a few thousand states.
// Throws vescale::Error for a bad or oversized regex.
bool fqn_match(const std::string& pattern, const std::string& fqn);

// How a module's inputs and outputs are resharded (one Placements per tensor).
struct ForwardSpec {
  std::vector<dtensor::Placements> input;
  std::vector<dtensor::Placements> output;
};

// When a parameter gets its initial values (the paper's phase=INIT): after sharding, the
// model's init reruns on the DTensor through the consistent RNG (the default); before
// sharding, it keeps the values it holds when parallelize runs (e.g. loaded weights).
enum class InitPhase { AfterSharding, BeforeSharding };

struct GradReduce {
  std::vector<std::string> dims;  // mesh dims the grads of Replicate params are reduced over
  double bucket_mb = 25;
  bool fused = true;
};

// The "pipeline" section (docs/pipeline.md): the mesh dim that cuts the model's layers into
// stages, the schedule that runs them, and where the cuts go. The plan's "mesh" then lists the
// other dims (the stage's mesh); an empty "mesh" means every parameter whole on its stage.
struct PipelineSpec {
  std::string dim = "pp";
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int64_t microbatches = 0;       // per step and data-parallel rank; required
  int64_t chunks = 1;             // stages per pipeline rank (interleaved_1f1b: >= 2)
  // The first layer of each stage, by the model's layer names ("layers.0", "layers.10", ...);
  // layers before the first entry join stage 0. Empty: "split".
  std::vector<std::string> stages;
  std::string split = "even";  // balance layers (the embedding and the head count as one each)
};

// A "moe" entry (docs/moe.md): a mixture-of-experts boundary, the experts module (one that
// implements nn::RoutedExperts) whose tokens the framework dispatches. With `ep` set, that mesh
// dim holds the experts (their weights Shard(0) on it) and tokens move over it by all-to-all;
// empty, each rank runs all its (replicated or tensor-sharded) experts on its own tokens.
struct MoESpec {
  std::string ep;
};

class Plan;
// A plan's context section, or its defaults (a mesh's cp dim without a plan, or a plan without
// the section).
ContextSpec context_of(const Plan* plan);

class Plan {
 public:
  Plan() = default;
  explicit Plan(std::vector<std::string> mesh_dims) : mesh_dims_(std::move(mesh_dims)) {}

  // Throws an Error naming the file, the key and the fix for bad JSON, unknown keys, wrong
  // types, and bad placements.
  static Plan from_json_file(const std::string& path);
  static Plan from_json(const std::string& text, const std::string& source = "<string>");

  // The C++ builder, equal to the JSON: patterns are tried in the order they were added.
  Plan& shard(const std::string& pattern, dtensor::Placements placements);
  Plan& forward(const std::string& module_pattern, ForwardSpec spec);
  Plan& phase(const std::string& pattern, InitPhase phase);
  // A params, forward or phase pattern that may match nothing (JSON: "optional": [...]); any
  // other pattern that matches no parameter or module is an error (a typo would otherwise leave
  // layers replicated).
  Plan& optional(const std::string& pattern);
  Plan& moe(const std::string& module_pattern, MoESpec spec);

  const std::vector<std::string>& mesh_dims() const { return mesh_dims_; }
  const std::vector<std::pair<std::string, dtensor::Placements>>& params() const { return params_; }
  const std::vector<std::pair<std::string, ForwardSpec>>& forwards() const { return forwards_; }
  const GradReduce& grad_reduce() const { return grad_reduce_; }
  int zero() const { return zero_; }
  const std::optional<PipelineSpec>& pipeline() const { return pipeline_; }
  const std::vector<std::pair<std::string, MoESpec>>& moes() const { return moes_; }
  // The moe entry of a module, if any pattern matches.
  const MoESpec* moe_for(const std::string& module_fqn) const;
  Plan& pipeline(PipelineSpec spec);
  // The "context" section: the dim that splits sequences (docs/context_parallel.md). Like the
  // pipeline dim, the plan's "mesh" does not list it: parameters are replicated over it, and
  // the model's mesh has it joined to dp.
  const std::optional<ContextSpec>& context() const { return context_; }
  Plan& context(ContextSpec spec);

  // The placements of one parameter: the first matching pattern wins; none is an error.
  const dtensor::Placements& placements_for(const std::string& fqn) const;
  // A parameter's init phase: the first matching "phase" pattern, else AfterSharding.
  InitPhase phase_for(const std::string& fqn) const;
  // The forward entry of a module, if any pattern matches.
  const ForwardSpec* forward_for(const std::string& module_fqn) const;

  // Checks the plan against a mesh (its dim names, in order) and every parameter (name,
  // global shape), including that each params and phase pattern matches a parameter (with a
  // "did you mean"); returns each parameter's placements with Shard dims normalized.
  std::map<std::string, dtensor::Placements> resolve(
      const std::vector<std::string>& mesh_dims,
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& params) const;

  // Throws when a forward pattern matches none of the model's module names.
  void check_modules(const std::vector<std::string>& module_names) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_ = "<builder>";
  std::vector<std::string> mesh_dims_;
  std::vector<std::pair<std::string, dtensor::Placements>> params_;
  std::vector<std::pair<std::string, ForwardSpec>> forwards_;
  std::vector<std::pair<std::string, InitPhase>> phases_;
  std::set<std::string> optional_;
  GradReduce grad_reduce_;
  int zero_ = 0;
  std::optional<PipelineSpec> pipeline_;
  std::optional<ContextSpec> context_;
  std::vector<std::pair<std::string, MoESpec>> moes_;
};

}  // namespace vescale::plan
