// vescale-plan: the layouts of a config's model on N devices, fastest first, as the cost model
// predicts them (docs/planner.md).
//   vescale-plan --config C --gpus N [--gpus-per-node 8] [--device h100|h200|a100|b200|file.json]
//                [--top K] [--global-batch-size G] [--layout "pp=8 dp=48 tp=8 sp zero1 mb1 1f1b"]
//                [--write DIR]
// --write DIR writes the best layout (or --layout's) as <DIR>/config.json and <DIR>/plan.json,
// which vescale-train runs as they are.
// --layout predicts that one layout (fitting or not) before the search's best.
//   vescale-plan --calibrate profile.json [--device-name NAME] [--config C [--set ...]]
// measures this machine into a device profile (under vescale-run --nproc-per-node N, the
// all-reduce over N ranks too); --device profile.json then plans with it.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/dist/launch_env.h"
#include "vescale/dist/world.h"
#include "vescale/planner/calibrate.h"
#include "vescale/planner/plan_template.h"
#include "vescale/planner/search.h"
#include "vescale/train/config.h"
#include "vescale/train/shipped_files.h"

namespace {

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s * 1e3);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vescale-plan: choose a layout for a config's model from the cost model"};
  std::string config, device = "h100", layout, write_dir;
  std::vector<std::string> overrides;
  vescale::planner::SearchOptions o;
  std::string calibrate_out, calibrate_name = "measured";
  app.add_option("--config", config, "train config: a JSON file or a shipped config's name");
  app.add_option("--calibrate", calibrate_out,
                 "measure this machine (GEMM curve, memory bandwidth, and the all-reduce when "
                 "launched with several ranks) and write the profile to this JSON file");
  app.add_option("--device-name", calibrate_name, "with --calibrate: the profile's name");
  app.add_option("--set", overrides, "override a config field, as vescale-train's --set");
  app.add_option("--gpus", o.gpus, "devices to plan for")->check(CLI::PositiveNumber);
  app.add_option("--gpus-per-node", o.gpus_per_node, "devices per node (default 8)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", device,
                 "device profile: h100, h200, a100, b200, or a profile JSON file");
  app.add_option("--top", o.top, "how many layouts to print (default 5)");
  app.add_option("--stack", o.stack,
                 "the training software predicted: vescale (this trainer, the default) or "
                 "megatron (Megatron-LM with Transformer Engine: to compare with its published "
                 "runs; --write still writes vescale's plan)");
  app.add_option("--global-batch-size", o.global_batch,
                 "sequences per step (default: the config's train.global_batch_size)");
  app.add_option("--layout", layout,
                 "also predict this layout, as the table writes it (\"pp=2 dp=4 tp=8 sp zero1 mb1 "
                 "1f1b\")");
  app.add_option("--write", write_dir,
                 "write the best layout (or --layout's) as <DIR>/config.json and <DIR>/plan.json");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!calibrate_out.empty()) {
      const bool launched = vescale::dist::launch_env_from_process().world_size > 1;
      if (launched) vescale::dist::init({.device = "auto"});
      // With --config, the elementwise rate is read from that model's own block.
      std::optional<vescale::train::Config> model;
      if (!config.empty())
        model = vescale::train::Config::from_file(vescale::train::find_config(config), overrides);
      const auto p = vescale::planner::calibrate(calibrate_name,
                                                 launched ? vescale::dist::device_type() : "cpu",
                                                 model ? &*model : nullptr);
      if (!launched || vescale::dist::rank() == 0) {
        std::ofstream(calibrate_out) << vescale::planner::to_json(p) << "\n";
        std::printf("vescale-plan: wrote %s (GEMM peak %.1f GFLOP/s, half-rate at %.3g "
                    "multiply-adds, memory %.1f GB/s, all-reduce %.2f GB/s + %.1f us per step)\n",
                    calibrate_out.c_str(), p.peak_flops / 1e9, p.gemm_half_work,
                    p.memory_bandwidth / 1e9, p.intra_node.bandwidth / 1e9,
                    p.intra_node.latency * 1e6);
      }
      if (launched) vescale::dist::shutdown();
      return 0;
    }
    VESCALE_CHECK(!config.empty() && o.gpus >= 1, "vescale-plan: --config and --gpus are needed "
                  "to plan (or --calibrate FILE to measure this machine)");
    const auto cfg =
        vescale::train::Config::from_file(vescale::train::find_config(config), overrides);
    if (o.global_batch == 0) o.global_batch = cfg.train.global_batch_size;
    const auto profile = vescale::planner::device_profile(device);
    const auto start = std::chrono::steady_clock::now();
    const auto shape = vescale::planner::model_shape(cfg);
    // The family's plan template decides whether SP is on the table (and --write needs it).
    std::string tmpl;
    try {
      tmpl = vescale::planner::plan_template_path(cfg.model.type);
      o.sequence_parallel = vescale::planner::template_has_sequence_parallel(tmpl);
    } catch (const vescale::Error&) {
      if (!write_dir.empty()) throw;
    }
    const auto r = vescale::planner::search(shape, cfg, profile, o);
    std::vector<vescale::planner::Candidate> rows;
    if (!layout.empty()) {
      const auto l = vescale::planner::parse_layout(layout);
      VESCALE_CHECK(l.ranks() == o.gpus, "--layout '", layout, "' has ", l.ranks(),
                    " ranks, not --gpus ", o.gpus);
      rows.push_back(
          {l, vescale::planner::predict(shape, cfg, l, o.global_batch, profile, o.gpus_per_node,
                                        nullptr, vescale::planner::training_stack(o.stack))});
    }
    rows.insert(rows.end(), r.best.begin(), r.best.end());
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("model %s (%lld layers, width %lld), %lld sequences of %lld per step, %s x %lld "
                "(%lld per node)\n",
                cfg.model.type.c_str(), static_cast<long long>(shape.n_layers),
                static_cast<long long>(shape.dim), static_cast<long long>(o.global_batch),
                static_cast<long long>(cfg.train.seq_len), profile.name.c_str(),
                static_cast<long long>(o.gpus), static_cast<long long>(o.gpus_per_node));
    int64_t pruned = 0;
    for (const auto& [why, n] : r.pruned) pruned += n;
    std::printf("weighed %lld layouts in %.2f s; left out %lld:", static_cast<long long>(r.weighed),
                took, static_cast<long long>(pruned));
    for (const auto& [why, n] : r.pruned) std::printf(" %s (%lld);", why.c_str(), static_cast<long long>(n));
    std::printf("\n");
    if (rows.empty()) {
      std::printf("no layout fits: more devices, a smaller micro batch, or activation checkpointing\n");
      return 1;
    }
    std::printf("%-3s %-44s %9s %10s %6s %9s %9s %8s %8s %8s %8s %8s\n", "#", "layout", "step ms",
                "tok/s/dev", "MFU", "peak GiB", "compute", "bubble", "tp", "ep", "dp", "optim");
    int i = layout.empty() ? 0 : -1;
    for (const auto& c : rows) {
      const auto& p = c.prediction;
      ++i;
      std::printf("%-3s %-44s %9s %10.0f %5.1f%% %9.3f %9s %8s %8s %8s %8s %8s\n",
                  i == 0 ? "=" : std::to_string(i).c_str(), c.layout.describe().c_str(),
                  ms(p.step_s).c_str(), p.tokens_per_s_per_device, 100 * p.mfu,
                  p.peak_memory_bytes / (1024.0 * 1024 * 1024), ms(p.compute_s).c_str(),
                  ms(p.bubble_s).c_str(), ms(p.exposed_s.at("tp")).c_str(),
                  ms(p.exposed_s.at("ep")).c_str(), ms(p.exposed_s.at("dp")).c_str(),
                  ms(p.optimizer_s).c_str());
    }
    std::printf("(times in ms per step on the busiest pipeline rank; tp/ep/dp: exposed "
                "communication; predictions of docs/planner.md's model)\n");
    if (!layout.empty()) {  // the layout asked for: its memory per pipeline rank
      std::printf("peak GiB per pipeline rank:");
      for (double b : rows.front().prediction.peak_memory_by_rank)
        std::printf(" %.3f", b / (1024.0 * 1024 * 1024));
      std::printf("\n");
    }
    if (!write_dir.empty()) {
      const auto& chosen = rows.front();
      std::filesystem::create_directories(write_dir);
      const std::string plan_path =
          std::filesystem::absolute(std::filesystem::path(write_dir) / "plan.json").string();
      const std::string config_path = (std::filesystem::path(write_dir) / "config.json").string();
      std::ofstream(plan_path) << vescale::planner::plan_for_layout(
                                      tmpl, chosen.layout, chosen.prediction.microbatches)
                               << "\n";
      std::ofstream(config_path) << vescale::planner::config_for_layout(cfg, chosen.layout,
                                                                       o.global_batch, plan_path)
                                 << "\n";
      std::printf("vescale-plan: wrote %s and %s for %s; run: vescale-train --config %s "
                  "--nproc-per-node %lld\n",
                  config_path.c_str(), plan_path.c_str(), chosen.layout.describe().c_str(),
                  config_path.c_str(), static_cast<long long>(chosen.layout.ranks()));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vescale-plan: %s\n", vescale::error_text(e, false).c_str());
    return 1;
  }
}
