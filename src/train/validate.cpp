#include "vescale/train/validate.h"

#include <algorithm>
#include <optional>

#include "vescale/models/shared/meta_device.h"
#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/parallel/context/ring_attention.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/parallel/pipeline/stages.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/plan/plan.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/run_plan.h"

namespace vescale::train {

namespace {

// Context parallelism (docs/context_parallel.md): what it needs of the layout and the model.
void check_context(const Config& config, const plan::ParallelDims& dims, const plan::Plan* plan,
                   const Model& model) {
  const std::string cp =
      "parallel.mesh's '" + dims.context + "' (" + std::to_string(dims.cp()) + ")";
  (void)dims.model_dims();  // throws unless cp follows dp
  VESCALE_CHECK(!model.attention_cores.empty(), "model.type '", config.model.type,
                "' has no attention that context parallelism knows (its builder names no "
                "attention cores: Model::attention_cores); ",
                cp, " needs a llama, mixtral or qwen3 model: drop the dim or change model.type");
  parallel::context::SequenceSplit{dims.cp(), config.train.seq_len, plan::context_of(plan).zigzag}
      .validate();
}

}  // namespace

void validate(const Config& config, int64_t world_size) {
  const mesh::MeshShape shape(config.parallel.mesh, world_size);
  // The plan with --set parallel.pipeline.*, and the micro-batches (a global batch that the
  // layout does not divide is refused here).
  RunPlan planned = run_plan(config, shape);
  std::optional<plan::Plan>& plan = planned.plan;
  const int64_t zero = zero_stage(config.parallel, plan ? &*plan : nullptr);
  const auto& t = config.train;
  VESCALE_CHECK(zero == 0 || config.parallel.grad_reduce != GradReduce::PerParam, "ZeRO stage ",
                zero, " (from ", config.parallel.zero > 0 ? "parallel.zero" : plan->source(),
                ") needs the bucketed reducer: set parallel.grad_reduce to overlap or bucketed");
  const plan::ParallelDims dims(shape, plan ? &*plan : nullptr);
  if (plan && plan->context())
    VESCALE_CHECK(!dims.context.empty(), "plan '", plan->source(), "': context.dim '",
                  plan->context()->dim,
                  "' is not a dim of parallel.mesh; add it (e.g. {\"dp\": 2, \"",
                  plan->context()->dim, "\": 2}) or drop the plan's \"context\" section");
  if (!plan && dims.cp() == 1) return;  // no plan: every parameter replicated on any mesh

  // The model's parameters and layers, without memory.
  Model model;
  {
    models::MetaDeviceScope meta;
    model = build_model(config.model);
  }
  if (dims.cp() > 1) check_context(config, dims, plan ? &*plan : nullptr, model);
  if (!plan) return;
  // The plan lists the model's mesh: without the pipeline dim, the context dim joined to dp.
  std::vector<std::string> names;
  for (const auto& [name, size] : dims.stage_dims()) names.push_back(name);
  if (!plan->mesh_dims().empty()) plan->resolve(names, parameter_shapes(*model.module));

  const std::optional<plan::PipelineSpec> pipe = plan->pipeline();
  if (!pipe) return;
  const std::string src = "plan '" + plan->source() + "': pipeline";
  const auto& mesh_names = shape.names();
  VESCALE_CHECK(
      std::find(mesh_names.begin(), mesh_names.end(), pipe->dim) != mesh_names.end(), src, ".dim '",
      pipe->dim, "' is not a dim of parallel.mesh (",
      [&] {
        std::string s;
        for (int64_t i = 0; i < shape.ndim(); ++i)
          s += (i ? ", " : "") + shape.names()[i] + "=" + std::to_string(shape.sizes()[i]);
        return s;
      }(),
      "); add it to the mesh (e.g. {\"", pipe->dim, "\": 2, \"dp\": -1})");
  VESCALE_CHECK(!model.layers.empty(), "model.type '", config.model.type,
                "' cannot be pipelined yet (its builder lists no pipeline layers); use a plan "
                "without \"pipeline\"");
  VESCALE_CHECK(t.grad_accum == 1 || t.grad_accum == pipe->microbatches,
                "train.grad_accum=", t.grad_accum, " but ", src,
                ".microbatches=", pipe->microbatches,
                ": a pipeline's micro-batches are the step's accumulation; set train.grad_accum "
                "to 1 (or to the same number)");
  const auto schedule = [&] {
    try {
      return parallel::pipeline::make_schedule(pipe->schedule, static_cast<int>(dims.pp()),
                                               static_cast<int>(pipe->microbatches),
                                               static_cast<int>(pipe->chunks));
    } catch (const Error& e) {
      if (t.global_batch_size == 0) throw;
      VESCALE_FAIL(e.what(), " (the micro-batches are train.global_batch_size=",
                   t.global_batch_size, " / (train.micro_batch_size=", t.batch_size, " x ",
                   planned.batch.data_ranks,
                   " data ranks); raise the global batch or lower the micro batch)");
    }
  }();
  std::vector<std::string> layers;
  for (const auto& l : model.layers) layers.push_back(l.name);
  parallel::pipeline::stage_starts(layers, *pipe, schedule.stages, plan->source());
  VESCALE_CHECK(
      zero <= 2, "ZeRO stage 3 with a pipeline plan: not supported ",
      "(the stages would gather their parameters per micro-batch); use parallel.zero=1 or 2");
  VESCALE_CHECK(t.sample_every == 0, "config '", config.source,
                "': train.sample_every: samples need the whole model in one process, and the "
                "pipeline plan splits it into stages; set train.sample_every=0 and run "
                "vescale-generate on a checkpoint");
}

}  // namespace vescale::train
