#include "vescale/train/metrics_logger.h"

#include "vescale/kernels/host_memory.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/cuda_device.h"
#include "vescale/train/tensorboard_writer.h"
#include "vescale/train/trainer.h"

namespace vescale::train {

MetricsLogger::MetricsLogger(const Config& config, Run run)
    : config_(config), run_(std::move(run)) {
  if (run_.rank == 0 && !config_.log.metrics_jsonl.empty()) open_jsonl();
  if (run_.rank == 0 && !config_.log.tensorboard.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(config_.log.tensorboard);
  peak_ = resolve_peak_flops(config_.train, run_.device);
  if (run_.rank == 0 && !peak_.note.empty()) {
    if (peak_.flops > 0)
      log::info(peak_.note);
    else
      log::warn(peak_.note);
  }
}

MetricsLogger::~MetricsLogger() = default;

// A resumed run keeps the lines of the steps it did not redo and appends.
void MetricsLogger::open_jsonl() {
  const auto& path = config_.log.metrics_jsonl;
  std::vector<std::string> kept;
  if (run_.resumed_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      try {
        if (nlohmann::json::parse(line).value("step", int64_t{0}) <= run_.resumed_step)
          kept.push_back(line);
      } catch (const nlohmann::json::exception&) {
        // a torn last line of a crashed run
      }
    }
  }
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  jsonl_ = std::make_unique<std::ofstream>(path, std::ios::trunc);
  VESCALE_CHECK(jsonl_->good(), "log.metrics_jsonl: cannot write '", path, "'");
  for (const auto& line : kept) *jsonl_ << line << '\n';
  jsonl_->flush();
}

double MetricsLogger::mfu(double tokens_per_s) const {
  if (peak_.flops <= 0) return 0;
  return run_.flops_per_token * tokens_per_s / (peak_.flops * static_cast<double>(run_.world_size));
}

void MetricsLogger::time(StepMetrics& m, std::chrono::steady_clock::time_point start) const {
  m.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  m.tokens_per_s = static_cast<double>(run_.tokens_per_step) / (m.step_ms / 1000.0);
  m.mfu = mfu(m.tokens_per_s);
}

double MetricsLogger::memory_gb() const {
  if (run_.device.rfind("cuda", 0) == 0) return static_cast<double>(dist::cuda_memory_used()) / 1e9;
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024 / 1e9;  // ru_maxrss is in KiB
}

void MetricsLogger::step(StepMetrics& m, bool last) {
  if (run_.rank != 0) return;
  m.memory_gb = memory_gb();
  m.tensor_peak_gb =
      static_cast<double>(kernels::memory_stats(run_.device.rfind("cuda", 0) == 0).peak) / 1e9;
  write(m);
  progress(m, last);
}

void MetricsLogger::write(const StepMetrics& m) {
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
        tb.add_scalar("moe/imbalance/" + run_.moe_layers.at(i), m.step, imbalance[i]);
      tb.add_scalar("moe/imbalance_max", m.step, worst);
    }
    tb.flush();
  }
  if (!jsonl_) return;
  nlohmann::ordered_json j{{"step", m.step},
                           {"loss", m.loss},
                           {"lr", m.lr},
                           {"grad_norm", m.grad_norm},
                           {"step_ms", m.step_ms},
                           {"tokens", m.step * run_.tokens_per_step},
                           {"tokens_per_s", m.tokens_per_s}};
  if (m.param_norm > 0) j["param_norm"] = m.param_norm;  // as the divergence guard weighs it
  if (peak_.flops > 0) j["mfu"] = m.mfu;
  j["memory_gb"] = m.memory_gb;
  j["tensor_peak_gb"] = m.tensor_peak_gb;
  if (m.val_loss) j["val_loss"] = *m.val_loss;
  if (!imbalance.empty()) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::object();
    for (size_t i = 0; i < imbalance.size(); ++i)
      layers[run_.moe_layers.at(i)] = {{"tokens", m.expert_loads[i]}, {"imbalance", imbalance[i]}};
    j["experts"] = std::move(layers);
    j["expert_imbalance_max"] = worst;
  }
  *jsonl_ << j.dump() << '\n';
  jsonl_->flush();
}

// Throughput over the steps since the last line (the first step, with its warm-up, is reported
// on its own).
void MetricsLogger::progress(const StepMetrics& m, bool last) {
  const auto& t = config_.train;
  window_ms_ += m.step_ms, ++window_;
  if (!(m.step % t.log_every == 0 || m.step == 1 || last)) return;
  const double ms = window_ms_ / static_cast<double>(window_);
  const double tok_s = static_cast<double>(run_.tokens_per_step) / (ms / 1000.0);
  char line[512];
  int n = std::snprintf(
      line, sizeof(line), "step %*lld/%lld | loss %.4f | lr %.2e | norm %.3f | %s tok/s",
      static_cast<int>(std::to_string(t.steps).size()), static_cast<long long>(m.step),
      static_cast<long long>(t.steps), m.loss, m.lr, m.grad_norm, human(tok_s, "").c_str());
  if (peak_.flops > 0) {
    const double device_flops = run_.flops_per_token * tok_s / static_cast<double>(run_.world_size);
    n += std::snprintf(line + n, sizeof(line) - n, " | MFU %.2f%%%s%s",
                       100.0 * device_flops / peak_.flops, peak_.label.empty() ? "" : " ",
                       peak_.label.c_str());
    if (device_flops > peak_.flops && !warned_mfu_) {
      warned_mfu_ = true;
      char msg[320];
      std::snprintf(msg, sizeof(msg),
                    "MFU above 100%%: each device reaches %.3g FLOP/s, above the peak of "
                    "%.3g (%s); set train.peak_flops to the device's dense peak FLOP/s",
                    device_flops, peak_.flops,
                    t.peak_flops.is_auto ? "train.peak_flops: auto" : "train.peak_flops");
      log::warn(msg);
    }
  }
  n += std::snprintf(line + n, sizeof(line) - n, " | %.0f ms/step | ETA %s", ms,
                     hms(ms / 1000.0 * static_cast<double>(t.steps - m.step)).c_str());
  if (m.val_loss) std::snprintf(line + n, sizeof(line) - n, " | val loss %.4f", *m.val_loss);
  log::info(line);
  window_ms_ = 0, window_ = 0;
}

// {"step": N, "timeline": {...}}: a line without "loss", after the window's last step.
void MetricsLogger::timeline(int64_t step, const std::string& summary_json) {
  if (run_.rank != 0) return;
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
  if (!jsonl_) return;
  nlohmann::ordered_json j{{"step", step}, {"timeline", summary}};
  *jsonl_ << j.dump() << '\n';
  jsonl_->flush();
}

void MetricsLogger::sample(int64_t step, const std::string& text) {
  if (!tensorboard_) return;
  tensorboard_->add_text("sample", step, text);
  tensorboard_->flush();
}

void MetricsLogger::done(const std::vector<StepMetrics>& ran, double seconds) const {
  if (run_.rank != 0 || ran.empty()) return;
  // What this process ran: a resumed run says so.
  const std::string steps =
      std::to_string(ran.size()) + (ran.size() == 1 ? " step" : " steps") +
      (run_.resumed_step > 0
           ? " (" + std::to_string(ran.front().step) + "-" + std::to_string(ran.back().step) +
                 ", resumed after step " + std::to_string(run_.resumed_step) + ")"
           : std::string());
  log::info(
      "done: " + steps + " in " + hms(seconds) + "; loss " + std::to_string(ran.front().loss) +
      " -> " + std::to_string(ran.back().loss) +
      (ran.back().val_loss ? ", val loss " + std::to_string(*ran.back().val_loss) : std::string()));
}

}  // namespace vescale::train
