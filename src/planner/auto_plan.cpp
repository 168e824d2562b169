#include "vescale/planner/auto_plan.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/planner/calibrate.h"
#include "vescale/planner/plan_template.h"
#include "vescale/planner/search.h"

namespace vescale::planner {

AutoPlan auto_plan(const train::Config& config, int64_t gpus_per_node) {
  const int rank = dist::rank();
  const int64_t world = dist::world_size();
  const std::string& wanted = config.parallel.plan_device;
  DeviceProfile device = wanted == "auto" ? calibrate("this machine", dist::device_type(), &config)
                                          : device_profile(wanted);
  const ModelShape shape = model_shape(config);
  const std::string tmpl = plan_template_path(config.model.type);
  std::string chosen;
  AutoPlan out;
  if (rank == 0) {
    SearchOptions o;
    o.gpus = world;
    o.gpus_per_node = gpus_per_node;
    o.global_batch = config.train.global_batch_size;
    o.top = 1;
    o.sequence_parallel = template_has_sequence_parallel(tmpl);
    const SearchResult r = search(shape, config, device, o);
    if (!r.best.empty()) {
      out.layout = r.best.front().layout;
      out.prediction = r.best.front().prediction;
      chosen = out.layout.describe();
      char line[512];
      std::snprintf(line, sizeof line,
                    "plan auto: %s, the best of %lld layouts of %lld ranks on %s; predicted %.0f "
                    "ms/step, peak memory %.3f GiB",
                    chosen.c_str(), static_cast<long long>(r.weighed),
                    static_cast<long long>(world), device.name.c_str(),
                    out.prediction.step_s * 1e3,
                    out.prediction.peak_memory_bytes / (1024.0 * 1024 * 1024));
      log::info(line);
    }
  }
  // Rank 0's choice (and where it writes nothing: every rank writes its own copy of the plan).
  chosen = dist::all_gather_text(chosen).front();
  VESCALE_CHECK(!chosen.empty(), "parallel.plan=auto: no layout of ", world, " ranks fits ",
                config.model.type, " with train.global_batch_size=",
                config.train.global_batch_size, " on ", device.name,
                "; more ranks, a smaller micro batch, or a device profile with more memory");
  if (rank != 0) out.layout = parse_layout(chosen);
  const int64_t per_microbatch = out.layout.micro_batch * out.layout.data_ranks();
  const std::string plan_path =
      (std::filesystem::temp_directory_path() /
       ("vescale-auto-plan-" + std::to_string(::getpid()) + ".json"))
          .string();
  std::ofstream(plan_path) << plan_for_layout(tmpl, out.layout,
                                              config.train.global_batch_size / per_microbatch)
                           << "\n";
  out.config = train::Config::from_json(
      config_for_layout(config, out.layout, config.train.global_batch_size, plan_path),
      config.source + " (parallel.plan=auto: " + chosen + ")");
  return out;
}

std::string plan_check_line(const StepPrediction& p, double measured_step_s,
                            double measured_peak_bytes) {
  char line[256];
  const double gib = 1024.0 * 1024 * 1024;
  std::snprintf(line, sizeof line,
                "plan check: predicted %.0f ms/step, measured %.0f ms/step (%+.1f%%), peak memory "
                "predicted %.3f GiB, measured %.3f GiB",
                p.step_s * 1e3, measured_step_s * 1e3,
                100.0 * (measured_step_s - p.step_s) / p.step_s, p.peak_memory_bytes / gib,
                measured_peak_bytes / gib);
  return line;
}

}  // namespace vescale::planner
