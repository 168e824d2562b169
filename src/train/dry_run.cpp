#include "vescale/train/dry_run.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "train/trainer_internal.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/plan/plan.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

namespace {

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

MemoryEstimate memory_per_rank(const Config& config, const mesh::MeshShape& mesh) {
  const ParamShapes shapes = parameter_shapes(config.model);
  std::map<std::string, dtensor::Placements> placements;
  int64_t zero = zero_stage(config.parallel, nullptr);
  if (!config.parallel.plan.empty()) {
    const plan::Plan plan = plan::Plan::from_json_file(config.parallel.plan);
    placements = plan.resolve(mesh.names(), shapes);
    zero = zero_stage(config.parallel, &plan);
  }
  const auto& names = mesh.names();
  const bool has_dp = std::find(names.begin(), names.end(), "dp") != names.end();
  const double dp = has_dp ? static_cast<double>(mesh.size("dp")) : 1.0;
  MemoryEstimate m;
  m.zero = zero;
  m.parameters = parameter_count(shapes);
  for (const auto& [name, shape] : shapes) {
    std::vector<int64_t> local = shape;
    bool replicated_on_dp = true;
    auto it = placements.find(name);
    if (it != placements.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) {
        const auto& p = it->second[i];
        if (!p.is_shard()) continue;
        const int64_t k = mesh.sizes()[i];
        local[p.dim] = (local[p.dim] + k - 1) / k;
        if (names[i] == "dp") replicated_on_dp = false;
      }
    }
    double n = 1;
    for (int64_t d : local) n *= static_cast<double>(d);
    const double zdiv = replicated_on_dp ? dp : 1.0;
    m.param_bytes += 4 * n / (zero >= 3 ? zdiv : 1.0);
    m.grad_bytes += 4 * n / (zero >= 2 ? zdiv : 1.0);
    // ZeRO keeps an fp32 copy of its parameter slice beside the moments (docs/parallel.md).
    m.optimizer_bytes += (zero >= 1 ? 12 : 8) * n / (zero >= 1 ? zdiv : 1.0);
  }
  return m;
}

std::string dry_run_report(const Config& config, const mesh::MeshShape& mesh) {
  const MemoryEstimate m = memory_per_rank(config, mesh);
  const auto& names = mesh.names();
  char count[64];
  std::snprintf(count, sizeof(count), "%.2fB", static_cast<double>(m.parameters) / 1e9);
  std::string mesh_line;
  for (size_t i = 0; i < names.size(); ++i)
    mesh_line += (i ? ", " : "") + names[i] + "=" + std::to_string(mesh.sizes()[i]);
  std::string out;
  out += "model: " + config.model.type + ", " + count + " parameters (" +
         std::to_string(m.parameters) + ")\n";
  out += "mesh: " + mesh_line + " (" + std::to_string(mesh.numel()) + " ranks)\n";
  out += "plan: " +
         (config.parallel.plan.empty() ? std::string("none (every parameter replicated)")
                                       : config.parallel.plan) +
         "; zero " + std::to_string(m.zero) + "\n";
  out +=
      "per rank (fp32 weights; AdamW exp_avg + exp_avg_sq, under ZeRO plus an fp32 slice of the "
      "weights): params " +
      gib(m.param_bytes) + ", grads " + gib(m.grad_bytes) + ", optimizer " +
      gib(m.optimizer_bytes) + ", total " + gib(m.param_bytes + m.grad_bytes + m.optimizer_bytes) +
      " (activations not counted)\n";
  return out;
}

std::string schedule_report(const Config& config) {
  VESCALE_CHECK(!config.parallel.plan.empty(), "--print-schedule: parallel.plan is empty; name a "
                "plan with a \"pipeline\" section (e.g. configs/plans/llama_pp.json)");
  const plan::Plan plan = plan::Plan::from_json_file(config.parallel.plan);
  VESCALE_CHECK(plan.pipeline(), "--print-schedule: plan '", plan.source(),
                "' has no \"pipeline\" section");
  const plan::PipelineSpec& spec = *plan.pipeline();
  int64_t ranks = 0;
  for (const auto& [name, size] : config.parallel.mesh)
    if (name == spec.dim) ranks = size;
  VESCALE_CHECK(ranks >= 1, "--print-schedule: parallel.mesh must give the pipeline dim '",
                spec.dim, "' a size (e.g. --set 'parallel.mesh={\"", spec.dim, "\": 4}')");
  const auto schedule = parallel::pipeline::make_schedule(
      spec.schedule, static_cast<int>(ranks), static_cast<int>(spec.microbatches),
      static_cast<int>(spec.chunks));
  // Per-stage costs: the layers a stage holds, as the even split gives them.
  const double layers = static_cast<double>(config.model.options->n_layers() + 2);
  const double per_stage = layers / schedule.stages;
  parallel::pipeline::ActionCosts costs{per_stage, per_stage, per_stage, 0};
  return parallel::pipeline::render_timeline(schedule, parallel::pipeline::simulate(schedule, costs));
}

}  // namespace vescale::train
