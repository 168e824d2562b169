// What rank 0 writes of each step: the metrics JSONL (one object per step) and TensorBoard
// event files (log.tensorboard).
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>

#include "vescale/common/check.h"
#include "vescale/dist/cuda_device.h"
#include "vescale/train/tensorboard_writer.h"
#include "vescale/train/trainer.h"

namespace vescale::train {

// A resumed run keeps the lines of the steps it did not redo and appends.
void Trainer::open_metrics() {
  const auto& path = config_.log.metrics_jsonl;
  std::vector<std::string> kept;
  if (resumed_step_ > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      try {
        if (nlohmann::json::parse(line).value("step", int64_t{0}) <= resumed_step_)
          kept.push_back(line);
      } catch (const nlohmann::json::exception&) {
        // a torn last line of a crashed run
      }
    }
  }
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  metrics_ = std::make_unique<std::ofstream>(path, std::ios::trunc);
  VESCALE_CHECK(metrics_->good(), "log.metrics_jsonl: cannot write '", path, "'");
  for (const auto& line : kept) *metrics_ << line << '\n';
  metrics_->flush();
}

void Trainer::open_tensorboard() {
  tensorboard_ = std::make_unique<TensorBoardWriter>(config_.log.tensorboard);
}

double Trainer::memory_gb() const {
  if (device_.rfind("cuda", 0) == 0) return static_cast<double>(dist::cuda_memory_used()) / 1e9;
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024 / 1e9;  // ru_maxrss is in KiB
}

void Trainer::log_step(const StepMetrics& m) {
  // Per MoE layer: max / mean of the tokens per expert (1 = perfectly balanced), for both sinks.
  std::vector<double> imbalance(m.expert_loads.size());
  double worst = 0;
  for (size_t i = 0; i < m.expert_loads.size(); ++i) {
    const auto& load = m.expert_loads[i];
    double sum = 0, max = 0;
    for (double x : load) sum += x, max = std::max(max, x);
    imbalance[i] = sum > 0 ? max / (sum / static_cast<double>(load.size())) : 0;
    worst = std::max(worst, imbalance[i]);
  }
  if (tensorboard_) {
    auto& tb = *tensorboard_;
    tb.add_scalar("train/loss", m.step, m.loss);
    if (m.param_norm > 0) tb.add_scalar("train/param_norm", m.step, m.param_norm);
    tb.add_scalar("train/lr", m.step, m.lr);
    tb.add_scalar("train/grad_norm", m.step, m.grad_norm);
    tb.add_scalar("perf/step_ms", m.step, m.step_ms);
    tb.add_scalar("perf/tokens_per_s", m.step, m.tokens_per_s);
    if (peak_.flops > 0) tb.add_scalar("perf/mfu", m.step, m.mfu);
    tb.add_scalar("perf/memory_gb", m.step, m.memory_gb);
    if (m.val_loss) tb.add_scalar("val/loss", m.step, *m.val_loss);
    if (!imbalance.empty()) {
      for (size_t i = 0; i < imbalance.size(); ++i)
        tb.add_scalar("moe/imbalance/" + model_.moe.layers.at(i), m.step, imbalance[i]);
      tb.add_scalar("moe/imbalance_max", m.step, worst);
    }
    tb.flush();
  }
  if (metrics_) {
    nlohmann::ordered_json j{{"step", m.step},
                             {"loss", m.loss},
                             {"lr", m.lr},
                             {"grad_norm", m.grad_norm},
                             {"step_ms", m.step_ms},
                             {"tokens", m.step * tokens_per_step()},
                             {"tokens_per_s", m.tokens_per_s}};
    if (m.param_norm > 0) j["param_norm"] = m.param_norm;  // as the divergence guard weighs it
    if (peak_.flops > 0) j["mfu"] = m.mfu;
    j["memory_gb"] = m.memory_gb;
    if (m.val_loss) j["val_loss"] = *m.val_loss;
    if (!imbalance.empty()) {
      nlohmann::ordered_json layers = nlohmann::ordered_json::object();
      for (size_t i = 0; i < imbalance.size(); ++i)
        layers[model_.moe.layers.at(i)] = {{"tokens", m.expert_loads[i]},
                                           {"imbalance", imbalance[i]}};
      j["experts"] = std::move(layers);
      j["expert_imbalance_max"] = worst;
    }
    *metrics_ << j.dump() << '\n';
    metrics_->flush();
  }
}

// {"step": N, "timeline": {...}}: a line without "loss", after the window's last step.
void Trainer::log_timeline(int64_t step, const std::string& summary_json) {
  const auto summary = nlohmann::json::parse(summary_json);
  if (tensorboard_) {
    auto& tb = *tensorboard_;
    for (const auto& r : summary["ranks"]) {
      const std::string rank = "timeline/rank" + std::to_string(r["rank"].get<int64_t>()) + "/";
      for (const char* k : {"step_ms", "compute_share", "overlapped_share", "exposed_share"})
        tb.add_scalar(rank + k, step, r[k].get<double>());
    }
    tb.add_scalar("timeline/straggler_rank", step, summary["straggler"]["rank"].get<double>());
    tb.add_scalar("timeline/compute_gap_ms_per_step", step,
                  summary["straggler"]["compute_gap_ms_per_step"].get<double>());
    tb.flush();
  }
  if (!metrics_) return;
  nlohmann::ordered_json j{{"step", step}, {"timeline", summary}};
  *metrics_ << j.dump() << '\n';
  metrics_->flush();
}

}  // namespace vescale::train
