// The metrics JSONL rank 0 writes: one object per step.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "vescale/common/check.h"
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

void Trainer::log_step(const StepMetrics& m) {
  if (metrics_) {
    nlohmann::ordered_json j{{"step", m.step},
                             {"loss", m.loss},
                             {"lr", m.lr},
                             {"grad_norm", m.grad_norm},
                             {"step_ms", m.step_ms},
                             {"tokens", m.step * tokens_per_step()},
                             {"tokens_per_s", m.tokens_per_s}};
    if (config_.train.peak_flops > 0) j["mfu"] = m.mfu;
    if (m.val_loss) j["val_loss"] = *m.val_loss;
    if (!m.expert_loads.empty()) {
      // Per MoE layer: tokens per expert and max / mean (1 = perfectly balanced).
      nlohmann::ordered_json layers = nlohmann::ordered_json::object();
      double worst = 0;
      for (size_t i = 0; i < m.expert_loads.size(); ++i) {
        const auto& load = m.expert_loads[i];
        double sum = 0, max = 0;
        for (double x : load) sum += x, max = std::max(max, x);
        const double imbalance = sum > 0 ? max / (sum / static_cast<double>(load.size())) : 0;
        worst = std::max(worst, imbalance);
        layers[model_.moe.layers.at(i)] = {{"tokens", load}, {"imbalance", imbalance}};
      }
      j["experts"] = std::move(layers);
      j["expert_imbalance_max"] = worst;
    }
    *metrics_ << j.dump() << '\n';
    metrics_->flush();
  }
}

// {"step": N, "timeline": {...}}: a line without "loss", after the window's last step.
void Trainer::log_timeline(int64_t step, const std::string& summary_json) {
  if (!metrics_) return;
  nlohmann::ordered_json j{{"step", step}, {"timeline", nlohmann::json::parse(summary_json)}};
  *metrics_ << j.dump() << '\n';
  metrics_->flush();
}

}  // namespace vescale::train
