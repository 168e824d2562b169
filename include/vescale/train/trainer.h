// The training loop: model from the config, data-parallel loader, grad accumulation, optional
// bf16 autocast (fp32 master weights) and activation checkpointing, AdamW with warmup + cosine
// and global-norm clipping, NaN/inf stops, progress lines and a metrics JSONL on rank 0.
// Written only with aten ops on whatever tensors the model returns, so the same loop drives a
// model whose parameters parallelize() turned into DTensors.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vescale/mesh/device_mesh.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/optim/optimizer.h"
#include "vescale/train/checkpoint_manager.h"
#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/peak_flops.h"
#include "vescale/train/token_data.h"

namespace vescale::parallel {
class GradReducer;
namespace pipeline {
class PipelineStages;
}
}  // namespace vescale::parallel

namespace vescale::train {

class ForwardBackward;  // forward_backward.h
class TimelineWindow;   // trainer_timeline.h
class MetricsLogger;    // metrics_logger.h
class GradientSync;     // gradient_sync.h
class StepGuard;        // step_guard.h

// One optimizer step, as logged (and written to the metrics JSONL).
struct StepMetrics {
  int64_t step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0;
  double param_norm =
      0;  // of the parameters this step ran with, as the guard weighs them (0: unknown)
  double step_ms = 0, tokens_per_s = 0, mfu = 0;  // mfu 0 without a peak (peak_flops.h)
  double memory_gb = 0;  // rank 0's device memory in use (GPU), or its peak resident set (CPU)
  // Rank 0's peak of bytes held by tensors so far (kernels/host_memory.h's counting allocator,
  // or CUDA's): what the dry run and the planner predict, without the runtime's own footprint.
  double tensor_peak_gb = 0;
  std::optional<double> val_loss;
  // Mixture of experts: per MoE layer, the (token, choice) assignments each expert got in this
  // step, over the whole global batch; empty for dense models.
  std::vector<std::vector<double>> expert_loads;
};

class Trainer {
 public:
  // `mesh` empty: one process, no parallelism. With a mesh, its "dp" dim (if any) splits the
  // data. Builds the model, optimizer and loaders; nothing runs yet.
  Trainer(Config config, std::optional<mesh::DeviceMesh> mesh = std::nullopt);
  ~Trainer();

  // Runs the optimizer steps from resumed_step() to train.steps, writing checkpoints when
  // checkpoint.dir is set. A checkpoint becomes `latest` once the next step's loss has passed
  // the divergence guard (the last one at once). Throws vescale::Error naming the step and what
  // it was doing (one line; libtorch's stack only at --log-level debug) when a step fails:
  // the guard (divergence_guard.h), bad token ids, any libtorch error. After a stop request
  // (stop_signal.h) on any rank, every rank stops after the same step, saves, and returns.
  // Returns the metrics of the steps it ran.
  std::vector<StepMetrics> run();
  // One optimizer step (train.grad_accum micro-batches); `step` is 0-based. Throws before the
  // update when the guard fails; commits a save in flight when it passes.
  StepMetrics step(int64_t step);
  // Mean loss over train.eval_steps validation batches (the same batches every call).
  double evaluate();

  // Writes a checkpoint of everything a bitwise resume needs after `steps_done` steps: the
  // parameters, AdamW's state, both random generators, the data position (docs/checkpoint.md).
  // Collective. With checkpoint.async it returns once this rank's copy is staged; the
  // checkpoint becomes visible at the next save, the next step that passes the guard, or
  // finish_checkpoint().
  void save_checkpoint(int64_t steps_done);
  // Commits a save still in flight (collective); no-op without one.
  void finish_checkpoint();
  // The steps the loaded checkpoint had done (0 when training starts fresh).
  int64_t resumed_step() const;
  // The signal run() stopped on (SIGTERM or SIGINT), 0 when it ran to train.steps.
  int stopped_by() const { return run_.stopped_by; }
  // This run's id, recorded in its checkpoints (a resumed run keeps the checkpoint's).
  const std::string& run_id() const;

  Model& model() { return model_; }
  const Config& config() const { return config_; }
  int64_t tokens_per_step() const;  // over all data-parallel ranks
  // The global batch: batch_size x micro-batches x data ranks.
  int64_t sequences_per_step() const { return tokens_per_step() / config_.train.seq_len; }
  // Micro-batches per step (run_plan.h): derived from train.global_batch_size, else
  // train.grad_accum, or the plan's pipeline.microbatches.
  int64_t microbatches() const;
  // How a step runs its micro-batches (forward_backward.h): its schedule and counters under a
  // pipeline plan.
  const ForwardBackward& forward_backward() const { return *forward_backward_; }
  // The bucketed gradient reducer; null without a mesh or with parallel.grad_reduce=per_param.
  const parallel::GradReducer* grad_reducer() const;
  // Runs at the start of every step (1-based number), inside the step's timeline span: for
  // embedders, and for tests (a synthetic straggler sleeps in it).
  void set_step_hook(std::function<void(int64_t step)> hook) { run_.step_hook = std::move(hook); }

 private:
  // Where this rank stands: the mesh (none: one process), its rank, the data shard it reads
  // (dp, and ep: plan::ParallelDims::data; a pipeline stage's own data dims), its device.
  struct Place {
    std::optional<mesh::DeviceMesh> mesh;
    // The mesh the model is laid out on when the mesh has a context dim: it joined to dp
    // (plan::ParallelDims::model_dims); else none, and the model is on `mesh`.
    std::optional<mesh::DeviceMesh> model_mesh;
    int rank = 0;
    int64_t world_size = 1, dp_rank = 0, dp_size = 1;
    std::string device = "cpu";
    const mesh::DeviceMesh* mesh_or_null() const { return mesh ? &*mesh : nullptr; }
  };
  struct Loaders {
    std::unique_ptr<DataLoader> train, val;  // val: null without validation data
  };
  // The transforms of the model that hold hook links: train.activation_checkpointing's, and
  // the timeline's window (log.timeline).
  struct Hooks {
    std::vector<nn::HookHandle> checkpointed;
    std::vector<nn::HookHandle> context;  // attention over the split sequence (cp)
    std::unique_ptr<TimelineWindow> timeline;
  };
  // What the run reports: the progress line, JSONL and TensorBoard (rank 0), and rank 0's
  // single-process copy of the model for train.sample_every, made at the first sample.
  struct Sampler;
  struct Reports {
    std::unique_ptr<MetricsLogger> metrics;
    std::unique_ptr<Sampler> sampler;
    ~Reports();
  };
  // What a step is doing (for error messages), the stop signal run() ended on, the embedder's
  // hook.
  struct RunState {
    const char* doing = "";
    int stopped_by = 0;
    std::function<void(int64_t)> step_hook;
  };

  // Builds the optimizer over the model's parameters (ShardedAdamW under ZeRO), then the
  // forward-backward over `stages` (a pipeline) or the whole model, `microbatches` per step,
  // on this rank's tokens of each sequence under context parallelism (`positions`).
  void build_step(std::unique_ptr<parallel::pipeline::PipelineStages> stages, int64_t zero,
                  int64_t microbatches, at::Tensor positions);
  void build_loaders();
  // Refuses a model whose dry-run estimate exceeds this rank's memory (train.allow_oversubscribe).
  void check_memory_fits() const;
  // The divergence guard on the step's loss and norms; its error names the checkpoint to go
  // back to (CheckpointManager::last_good).
  void check_guard(const StepMetrics& m);
  // The batch a checkpoint records (train.batch_size, micro-batches, data ranks, seq_len).
  StepBatch step_batch() const;
  // train.sample_every (trainer_sample.cpp); collective.
  void print_sample(int64_t step);
  // After the optimizer step: the step's global expert loads into m, and the aux-loss-free
  // expert bias update with them (trainer_moe.cpp).
  void balance_experts(StepMetrics& m);

  Config config_;
  Place place_;
  Model model_;
  std::unique_ptr<GradientSync> grads_;  // on a mesh of several ranks
  std::unique_ptr<optim::Optimizer> optimizer_;  // AdamW, or ShardedAdamW with parallel.zero >= 1
  std::unique_ptr<ForwardBackward> forward_backward_;  // local, or this rank's pipeline stages
  Loaders data_;
  std::unique_ptr<CheckpointManager> checkpoints_;  // with checkpoint.dir
  std::unique_ptr<StepGuard> guard_;
  Reports report_;
  Hooks hooks_;
  RunState run_;
};

// The .bin files a config's data section names (globs expanded, sorted), or the built-in
// corpus when it names none. `split` is "train" or "val". Throws when a pattern matches nothing.
std::vector<std::string> data_files(const DataConfig& data, const std::string& split);

}  // namespace vescale::train
