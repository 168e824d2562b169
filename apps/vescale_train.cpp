// vescale-train: the training entry point.
//   vescale-train --config configs/X.json|NAME [--set a.b=v ...] [--nproc-per-node N]
//                 [--dry-run [--world-size N] [--gpus-per-node G]] [--print-config]
//                 [--print-schedule] [--timeline trace.json]
// With --nproc-per-node (or --nnodes) it starts its own ranks through the built-in launcher.
// --dry-run prints the parameter count and per-rank memory under the plan without building
// the model (one process: for the mesh N ranks would form, the configured sizes without
// --world-size; launched ranks: for the real one).
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "launch_flags.h"
#include "vescale/common/check.h"
#include "vescale/common/input_error.h"
#include "vescale/common/error_text.h"
#include "vescale/common/logging.h"
#include "vescale/kernels/host_memory.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/train/config.h"
#include "vescale/train/dry_run.h"
#include "vescale/train/shipped_files.h"
#include "vescale/train/stop_signal.h"
#include "vescale/train/trainer.h"
#include "vescale/train/validate.h"
#include "vescale/planner/auto_plan.h"

namespace {
// This rank's peak of bytes held by tensors (the counting allocator, or CUDA's): what the planner
// predicts, without the runtime's own footprint.
double peak_memory_bytes() {
  return static_cast<double>(
      vescale::kernels::memory_stats(vescale::dist::device_type() == "cuda").peak);
}

// A file of ours that must not outlive the run (parallel.plan=auto's plan), error or not.
struct RemovedAtExit {
  std::string path;
  ~RemovedAtExit() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove(path, ignored);
  }
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vescale-train: SPMD training of the model in a config"};
  vescale::dist::LauncherOptions launch;
  vescale::apps::add_launch_flags(app, launch);
  std::string config, log_level, timeline;
  std::vector<std::string> overrides;
  bool dry_run = false, print_schedule = false, print_config = false;
  int64_t world_size = 0, gpus_per_node = 0;
  app.add_option("--config", config,
                 "train config: a JSON file, or the name of a shipped one (nanogpt_tiny, ...)")
      ->required();
  app.add_option("--set", overrides, "override a config field: --set train.steps=200");
  app.add_flag("--dry-run", dry_run,
               "print the mesh, parameter count and per-rank memory, then stop");
  app.add_option("--world-size", world_size,
                 "with --dry-run: the number of ranks to plan for (a -1 mesh dim takes the rest)")
      ->check(CLI::PositiveNumber);
  app.add_option("--gpus-per-node", gpus_per_node,
                 "with --dry-run: devices per node, to show which mesh dims stay within a node")
      ->check(CLI::PositiveNumber);
  app.add_flag("--print-config", print_config,
               "print the resolved config (after every --set, paths resolved) as JSON, then stop");
  app.add_flag("--print-schedule", print_schedule,
               "print the pipeline schedule of the plan (one line per pipeline rank), then stop");
  app.add_option("--timeline", timeline,
                 "write the merged nD timeline of steps 2-4 (or log.timeline.steps) to this "
                 "Chrome trace JSON, and print where the step time went");
  app.add_option("--log-level", log_level,
                 "trace|debug|info|warn|error|off (default: info on rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help: 0
    return code == 0 ? 0 : vescale::dist::kExitInputError;
  }
  const bool debug = log_level == "debug" || log_level == "trace";
  // Until the world forms, every error is the input's (flags, config, plan): exit 2, which a
  // launcher that restarts failed ranks does not restart; so is an InputError after it.
  bool input_checked = false;
  try {
    // Not yet a rank: start the ranks, each running this same command line. The binary by its
    // real path (so ps shows vescale-train, not exe) and each rank named "vescale-train[rank k]".
    if (!std::getenv("VESCALE_LAUNCHED") &&
        (launch.nproc_per_node > 1 || launch.nnodes > 1 || launch.agent())) {
      std::vector<std::string> cmd{std::filesystem::read_symlink("/proc/self/exe").string()};
      for (int i = 1; i < argc; ++i) cmd.emplace_back(argv[i]);
      launch.rank_name = "vescale-train";
      try {
        return vescale::dist::launch(launch, cmd);
      } catch (const vescale::InputError&) {
        throw;  // bad launcher flags: exit 2 below
      } catch (const std::exception& e) {
        std::fprintf(stderr, "vescale-train: %s\n", vescale::error_text(e, debug).c_str());
        return 1;  // the launch failed (the rendezvous, a lost launcher): not the input
      }
    }
    if (!timeline.empty()) overrides.push_back("log.timeline.out=" + timeline);
    const auto cfg =
        vescale::train::Config::from_file(vescale::train::find_config(config), overrides);
    if (print_config) {
      std::printf("%s\n", cfg.to_json().c_str());
      return 0;
    }
    if (print_schedule) {
      std::printf("%s", vescale::train::schedule_report(cfg).c_str());
      return 0;
    }
    vescale::mesh::MeshDims dims(cfg.parallel.mesh.begin(), cfg.parallel.mesh.end());
    const auto env = vescale::dist::launch_env_from_process();
    VESCALE_CHECK(dry_run || (world_size == 0 && gpus_per_node == 0),
                  "--world-size and --gpus-per-node describe a world for --dry-run; a run takes "
                  "its world from the launcher (--nproc-per-node, --nnodes)");
    if (dry_run && env.world_size == 1) {
      // One process: the mesh `world_size` ranks would form (without it, the configured sizes,
      // -1 dims taking 1), reported without forming it.
      int64_t world = world_size;
      if (world == 0) {
        world = 1;
        for (auto& [name, size] : dims) world *= size > 0 ? size : 1;
      }
      vescale::log::init(0, log_level);
      vescale::train::validate(cfg, world);
      std::printf("%s", vescale::train::dry_run_report(cfg, vescale::mesh::MeshShape(dims, world),
                                                       gpus_per_node)
                            .c_str());
      return 0;
    }
    // Before any rendezvous: a config or plan error reads the same at 1 rank or N.
    vescale::train::validate(cfg, env.world_size);
    input_checked = true;
    vescale::dist::init();
    const int rank = vescale::dist::rank();
    vescale::log::init(rank, !log_level.empty() ? log_level : rank == 0 ? cfg.log.level : "");
    // parallel.plan=auto: the planner chooses the layout for this world (collective).
    auto run_cfg = cfg;
    RemovedAtExit auto_plan_file;
    std::optional<vescale::planner::StepPrediction> predicted;
    if (cfg.parallel.auto_plan() && !dry_run) {
      auto chosen = vescale::planner::auto_plan(cfg, env.local_world_size);
      run_cfg = chosen.config;
      auto_plan_file.path = run_cfg.parallel.plan;  // the trainer reads it; gone when we end
      if (rank == 0) predicted = chosen.prediction;
      vescale::train::validate(run_cfg, env.world_size);
      dims = vescale::mesh::MeshDims(run_cfg.parallel.mesh.begin(), run_cfg.parallel.mesh.end());
    }
    vescale::log::debug("config " + run_cfg.source + " resolved:\n" + run_cfg.to_json());
    auto mesh = vescale::mesh::DeviceMesh::init(dims);
    const int threads = at::get_num_threads();
    std::printf("%s (launched by %s, device %s, %d intra-op thread%s)\n", mesh.to_string().c_str(),
                vescale::dist::describe(env).c_str(), vescale::dist::device_string().c_str(),
                threads, threads == 1 ? "" : "s");
    std::fflush(stdout);
    if (dry_run) {
      if (rank == 0)
        std::printf("%s", vescale::train::dry_run_report(cfg, mesh.shape(), gpus_per_node).c_str());
      vescale::dist::shutdown();
      return 0;
    }
    // SIGTERM / SIGINT: finish the step, save, exit 0 / 130 (stop_signal.h).
    vescale::train::install_stop_handlers();
    int stopped_by = 0;
    {
      vescale::train::Trainer trainer(run_cfg, mesh);
      if (predicted) {
        // After a few steps (the first ones warm up): measured against predicted, once.
        auto starts = std::make_shared<std::vector<std::chrono::steady_clock::time_point>>();
        const int64_t check_at = std::min<int64_t>(6, run_cfg.train.steps);
        trainer.set_step_hook([starts, check_at, p = *predicted](int64_t step) {
          starts->push_back(std::chrono::steady_clock::now());
          if (step != check_at || starts->size() < 3) return;
          std::vector<double> took;
          for (size_t i = 2; i < starts->size(); ++i)
            took.push_back(std::chrono::duration<double>((*starts)[i] - (*starts)[i - 1]).count());
          std::sort(took.begin(), took.end());
          vescale::log::info(vescale::planner::plan_check_line(p, took[took.size() / 2],
                                                               peak_memory_bytes()));
        });
      }
      trainer.run();
      stopped_by = trainer.stopped_by();
    }
    vescale::dist::shutdown();
    return stopped_by == SIGINT ? 130 : 0;
  } catch (const std::exception& e) {
    // Source locations and libtorch's stack only when asked for: they name no field of the
    // user's.
    std::fprintf(stderr, "vescale-train: %s\n", vescale::error_text(e, debug).c_str());
    const bool input = !input_checked || dynamic_cast<const vescale::InputError*>(&e);
    return input ? vescale::dist::kExitInputError : 1;
  }
}
