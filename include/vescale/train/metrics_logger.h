// What a run reports of each step, written by rank 0: the progress line (loss, lr, norm,
// tokens/s, MFU, ms/step, ETA, val loss), the metrics JSONL, TensorBoard event files, the
// timeline window's summary, the samples' text, and the closing "done:" line. Every rank holds
// one (the MFU peak is resolved on every rank at once: on a CPU it is each rank's share of the
// cores); only rank 0's writes anything. Not collective.
#pragma once
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "vescale/train/config.h"
#include "vescale/train/peak_flops.h"

namespace vescale::train {

class TensorBoardWriter;
struct StepMetrics;

class MetricsLogger {
 public:
  struct Run {
    int rank = 0;
    int64_t world_size = 1;       // devices, for MFU per device
    int64_t tokens_per_step = 0;  // over every data rank
    double flops_per_token = 0;   // model FLOPs per trained token
    int64_t resumed_step = 0;     // a resumed run keeps the JSONL lines up to here
    std::string device = "cpu";
    std::vector<std::string> moe_layers;  // names for StepMetrics::expert_loads, in order
  };
  // Opens log.metrics_jsonl and log.tensorboard (rank 0) and resolves train.peak_flops (every
  // rank), logging where the peak came from.
  MetricsLogger(const Config& config, Run run);
  ~MetricsLogger();
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // MFU of a throughput against the peak (0 without one).
  double mfu(double tokens_per_s) const;
  // At the end of a step that began at `start`: m.step_ms, tokens_per_s and mfu.
  void time(StepMetrics& m, std::chrono::steady_clock::time_point start) const;
  // After each step, in order: fills m.memory_gb, writes the JSONL line and the scalars, and the
  // progress line on the first, every log.every-th and the `last` step (throughput averaged
  // over the steps since the previous line).
  void step(StepMetrics& m, bool last);
  // The timeline window's summary (JSON), as a line of the JSONL and scalars.
  void timeline(int64_t step, const std::string& summary_json);
  // A sample's text, after it was logged.
  void sample(int64_t step, const std::string& text);
  // The closing line: the steps this process ran, its first and last loss.
  void done(const std::vector<StepMetrics>& ran, double seconds) const;

 private:
  double memory_gb() const;
  void open_jsonl();
  void write(const StepMetrics& m);
  void progress(const StepMetrics& m, bool last);

  const Config& config_;
  Run run_;
  PeakFlops peak_;
  std::unique_ptr<std::ofstream> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  double window_ms_ = 0;  // the steps since the last progress line
  int64_t window_ = 0;
  bool warned_mfu_ = false;
};

}  // namespace vescale::train
