#include "vescale/train/run_plan.h"

#include <string>

#include "vescale/common/check.h"
#include "vescale/plan/parallel_dims.h"

namespace vescale::train {
namespace {

// --set parallel.pipeline.*: the plan's pipeline section with the config's fields.
void apply_pipeline_overrides(const Config& config, std::optional<plan::Plan>& plan) {
  const PipelineOverrides& o = config.parallel.pipeline;
  if (!o.any()) return;
  VESCALE_CHECK(plan && plan->pipeline(), "config '", config.source,
                "': parallel.pipeline.* overrides a plan's \"pipeline\" section, but ",
                plan ? "plan '" + plan->source() + "' has none"
                     : std::string("parallel.plan is empty"),
                "; name a pipeline plan (e.g. configs/plans/llama_pp.json)");
  plan::PipelineSpec spec = *plan->pipeline();
  if (o.schedule) spec.schedule = *o.schedule;
  if (o.microbatches) spec.microbatches = o.microbatches;
  if (o.chunks) spec.chunks = o.chunks;
  if (!o.split.empty()) spec.split = o.split, spec.stages.clear();
  if (!o.stages.empty()) spec.stages = o.stages;
  plan->pipeline(spec);
}

std::string data_dims_text(const plan::ParallelDims& dims) {
  std::string s;
  for (const auto& d : dims.data) s += (s.empty() ? "" : ", ") + d + "=" + std::to_string(dims.size(d));
  return s.empty() ? "no data dim" : s;
}

}  // namespace

RunPlan run_plan(const Config& config, const mesh::MeshShape& mesh) {
  RunPlan out;
  // "auto" is decided after the rendezvous (planner/auto_plan.h); until then, no plan.
  if (!config.parallel.plan.empty() && !config.parallel.auto_plan())
    out.plan = plan::Plan::from_json_file(config.parallel.plan);
  apply_pipeline_overrides(config, out.plan);
  const plan::ParallelDims dims(mesh, out.plan ? &*out.plan : nullptr);
  const auto& t = config.train;
  BatchLayout& b = out.batch;
  b.micro_batch = t.batch_size;
  b.data_ranks = dims.data_size();
  const std::optional<plan::PipelineSpec> pipe = out.plan ? out.plan->pipeline() : std::nullopt;
  if (t.global_batch_size == 0) {
    b.microbatches = pipe ? pipe->microbatches : t.grad_accum;
    return out;
  }
  const int64_t per_microbatch = b.micro_batch * b.data_ranks;
  VESCALE_CHECK(t.global_batch_size % per_microbatch == 0, "config '", config.source,
                "': train.global_batch_size=", t.global_batch_size,
                " is not a multiple of train.micro_batch_size=", b.micro_batch, " x ",
                b.data_ranks, " data ranks (", data_dims_text(dims), ") = ", per_microbatch,
                "; choose a global batch that is (", per_microbatch * (t.global_batch_size / per_microbatch + 1),
                ", say), or a micro batch or data ranks that divide it");
  b.microbatches = t.global_batch_size / per_microbatch;
  if (pipe) {
    plan::PipelineSpec spec = *pipe;
    spec.microbatches = b.microbatches;
    out.plan->pipeline(spec);
  }
  return out;
}

}  // namespace vescale::train
