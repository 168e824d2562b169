// The training loop: the Trainer built from a config, its steps, evaluation and run(). Its
// components: checkpoints (checkpoint_manager.h), what it reports (metrics_logger.h), a step's
// micro-batches (forward_backward.h), the gradients' reduction (gradient_sync.h), the divergence
// guard (step_guard.h).
#include "vescale/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "train/trainer_internal.h"
#include "train/trainer_timeline.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/nn/block_pattern.h"
#include "vescale/parallel/activation_checkpoint.h"
#include "vescale/parallel/context/context_parallel.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/parallel/sharded_adamw.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/optim/adamw.h"
#include "vescale/optim/lr_schedule.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/plan/plan.h"
#include "vescale/random/random.h"
#include "vescale/train/checkpoint_manager.h"
#include "vescale/train/dry_run.h"
#include "vescale/train/gradient_sync.h"
#include "vescale/train/step_guard.h"
#include "vescale/train/hf_weights.h"
#include "vescale/train/peak_flops.h"
#include "vescale/train/forward_backward.h"
#include "vescale/dist/progress.h"
#include "vescale/train/metrics_logger.h"
#include "vescale/train/model_layout.h"
#include "vescale/train/run_plan.h"
#include "vescale/train/validate.h"
#include "vescale/kernels/host_memory.h"
#include "vescale/timeline/recorder.h"
#include "vescale/train/stop_signal.h"

namespace vescale::train {
namespace {

// The run's plan on a mesh (run_plan.h), every parameter replicated without a file.
// lay_out_model meets parallelize() with it (or cuts pipeline stages, under a "pipeline"
// section); everything else in this file is plain aten code that works unchanged on DTensors.
// The parameters become DTensors and the model's own init reruns on them through the Philox
// RNG, so the initial weights are bitwise the same for every mesh, world size and plan. On one
// device the parameters stay plain tensors (after that same init): nothing to distribute, no
// DTensor dispatch per op.
plan::Plan plan_or_replicated(std::optional<plan::Plan> plan, const mesh::DeviceMesh& mesh) {
  if (plan) return std::move(*plan);
  plan::Plan all(mesh.dim_names());
  all.shard("*", dtensor::Placements(mesh.ndim(), dtensor::Replicate()));
  return all;
}

// Under context parallelism the model is laid out on the mesh with the context dim joined to dp
// (ParallelDims::model_dims: validate() has refused a context dim that does not follow dp);
// none otherwise.
std::optional<mesh::DeviceMesh> model_mesh(const mesh::DeviceMesh& mesh,
                                           const plan::ParallelDims& dims) {
  if (dims.context.empty()) return std::nullopt;
  const auto& names = mesh.dim_names();
  const bool has_dp = std::find(names.begin(), names.end(), plan::kDataDim) != names.end();
  return has_dp ? mesh.join({plan::kDataDim, dims.context}, plan::kDataDim)
                : mesh.join({dims.context}, plan::kDataDim);
}

// One process trains the whole model: no plan, one data rank.
Config without_plan(Config config) {
  config.parallel.plan.clear();
  config.parallel.pipeline = {};
  config.parallel.mesh = {{plan::kDataDim, 1}};
  return config;
}

// The names of the step's timeline spans, interned once (the forward-backward has its own).
struct SpanNames {
  uint32_t step = timeline::intern("step"), grad_sync = timeline::intern("reduce gradients"),
           clip = timeline::intern("clip gradients"),
           optimizer = timeline::intern("optimizer step"),
           commit = timeline::intern("commit checkpoint"),
           experts = timeline::intern("balance experts"), eval = timeline::intern("evaluate"),
           save = timeline::intern("stage checkpoint");
};
const SpanNames& span_names() {
  static const SpanNames names;
  return names;
}

// The part of a step that is running: named for error messages (the trainer's `doing`), and a
// span of the timeline until the next part starts or end().
class StepPhase {
 public:
  explicit StepPhase(const char*& doing) : doing_(doing) {}
  void operator()(const char* doing, timeline::Kind kind, uint32_t name) {
    doing_ = doing;
    span_.reset();
    span_.emplace(kind, name);
  }
  void end() { span_.reset(); }

 private:
  const char*& doing_;
  std::optional<timeline::Scope> span_;
};

// The files rank 0 writes besides the checkpoints (the metrics, the merged timeline): their
// folders writable before the first step.
void check_output_files(const Config& config, int rank) {
  if (rank != 0) return;
  for (const auto& [path, field] : {std::pair{config.log.metrics_jsonl, "log.metrics_jsonl"},
                                    std::pair{config.log.timeline.out, "log.timeline.out"}}) {
    if (path.empty()) continue;
    VESCALE_CHECK(!std::filesystem::is_directory(path), field, " '", path,
                  "' is a folder; name a file");
    const auto parent = std::filesystem::path(path).parent_path();
    check_writable_dir(parent.empty() ? "." : parent.string(), std::string(field) + "'s folder");
  }
}

}  // namespace

Trainer::Trainer(Config config, std::optional<mesh::DeviceMesh> mesh)
    : config_(std::move(config)) {
  const auto& t = config_.train;
  place_.mesh = std::move(mesh);
  const mesh::DeviceMesh* on = place_.mesh_or_null();
  if (on) {
    place_.rank = on->rank();
    place_.world_size = on->size();
    place_.device = dist::device_string();
  }
  // What can be checked without the world is checked as vescale-train checks it before the world.
  if (on) validate(config_, place_.world_size);
  if (on && place_.rank == 0)
    if (auto waste = zero_without_data_ranks(config_, on->shape())) log::warn(*waste);
  // Everything the run will write, before the first step (not at the first save, hours later).
  on_all_ranks([&] {
    if (!config_.checkpoint.dir.empty())
      checkpoints_ = std::make_unique<CheckpointManager>(config_, place_.rank);
    check_output_files(config_, place_.rank);
  });
  on_all_ranks([&] { check_memory_fits(); });  // hosts differ: one short rank stops them all
  // One seed for everything: libtorch's generator (model init, plain-tensor dropout) and ours.
  torch::manual_seed(t.seed);
  random::manual_seed(t.seed);

  if (place_.device == "cpu") kernels::cache_host_memory();
  // The plan and the step's micro-batches (train.global_batch_size fixes the step's sequences).
  RunPlan planned = on ? run_plan(config_, on->shape())
                       : run_plan(without_plan(config_), mesh::MeshShape({{plan::kDataDim, 1}}, 1));
  std::optional<plan::Plan> plan;
  std::optional<plan::ParallelDims> dims;
  const mesh::DeviceMesh* model_on = on;
  if (on) {
    dims.emplace(on->shape(), planned.plan ? &*planned.plan : nullptr);
    place_.model_mesh = model_mesh(*on, *dims);
    if (place_.model_mesh) model_on = &*place_.model_mesh;
    plan = plan_or_replicated(std::move(planned.plan), *model_on);
  }
  auto laid = lay_out_model(config_, plan ? &*plan : nullptr, model_on, place_.device);
  model_ = std::move(laid.model);
  at::Tensor positions;
  if (dims && dims->cp() > 1) {
    const plan::ContextSpec context = plan::context_of(&*plan);
    const parallel::context::SequenceSplit split{dims->cp(), t.seq_len, context.zigzag};
    hooks_.context = parallel::context::attend_over_split_sequence(
        *model_.module, model_.attention_cores, split, on->group(dims->context), context.attention);
    positions = split.positions(on->coordinate(dims->context)).to(at::Device(place_.device));
  }
  int64_t zero = 0;
  if (on) {
    const auto shard = data_shard(*on);  // dp, and ep (docs/moe.md); not cp
    place_.dp_rank = shard.rank, place_.dp_size = shard.size;
    zero = zero_stage(config_.parallel, &*plan);
    // One device has no gradient to reduce (and its parameters are plain tensors).
    if (laid.replica_mesh->size() > 1)
      grads_ = std::make_unique<GradientSync>(config_, *plan, *laid.replica_mesh, model_, zero);
  }
  dtensor::set_static_eager(config_.parallel.static_eager);
  // A pipeline stage may hold no block (only the embedding, say).
  if (t.activation_checkpointing && nn::has_block(*model_.module, model_.block_pattern))
    hooks_.checkpointed = parallel::enable_activation_checkpointing(*model_.module, model_.block_pattern,
                                                          model_.block_side_outputs);
  // Around the checkpointing hook, so a block's forward span is the forward it runs.
  if (config_.log.timeline.on())
    hooks_.timeline =
        std::make_unique<TimelineWindow>(config_, on, *model_.module, model_.block_pattern);
  build_step(std::move(laid.stages), zero, planned.batch.microbatches, std::move(positions));
  build_loaders();
  guard_ = std::make_unique<StepGuard>(
      DivergenceGuardOptions{t.max_loss_spike, t.warmup_steps, config_.model.vocab_size(), t.lr,
                             t.grad_clip},
      place_.world_size);
  if (checkpoints_)
    checkpoints_->start({.model = &model_,
                         .optimizer = optimizer_.get(),
                         .sharded = grads_ ? grads_->sharded() : nullptr,
                         .train_loader = data_.train.get(),
                         .device = place_.device,
                         .some_layers_only = forward_backward_->schedule() != nullptr},
                        step_batch());
  guard_->measure(*optimizer_, 0);  // the guard's first reference: the weights step 1 runs with
  // Every rank at once: on a CPU the measured GEMM peak is each rank's share of the cores.
  report_.metrics = std::make_unique<MetricsLogger>(
      config_, MetricsLogger::Run{place_.rank, place_.world_size, tokens_per_step(),
                                  flops_per_token(config_.model, t.seq_len), resumed_step(),
                                  place_.device, model_.moe.layers});
}

void Trainer::build_step(std::unique_ptr<parallel::pipeline::PipelineStages> stages, int64_t zero,
                         int64_t microbatches, at::Tensor positions) {
  const auto& t = config_.train;
  optim::NamedParams named;
  for (const auto& item : model_.module->named_parameters())
    named.emplace_back(item.key(), item.value());
  std::vector<at::Tensor> params;  // the model's order, for the norm's summation
  for (const auto& [n, p] : named) params.push_back(p);
  const optim::AdamWOptions adamw{
      .lr = t.lr, .beta1 = t.betas[0], .beta2 = t.betas[1], .eps = t.eps};
  parallel::GradReducer* reducer = grads_ ? grads_->reducer() : nullptr;
  if (zero >= 1 && reducer) {
    optimizer_ = std::make_unique<parallel::ShardedAdamW>(
        *reducer, grads_->sharded(), optim::decay_groups(named, t.weight_decay), adamw);
  } else {
    optimizer_ =
        std::make_unique<optim::AdamW>(optim::decay_groups(named, t.weight_decay), adamw, params);
  }
  const mesh::DeviceMesh* on = place_.mesh_or_null();
  const mesh::DeviceMesh* model_on = place_.model_mesh ? &*place_.model_mesh : on;
  ForwardBackwardOptions fb{model_on,
                            place_.device,
                            t.dtype == DType::Bf16,
                            microbatches,
                            reducer,
                            std::move(positions),
                            [this](const char* p) { run_.doing = p; }};
  forward_backward_ = make_forward_backward(model_, std::move(stages), place_.rank, std::move(fb));
}

void Trainer::build_loaders() {
  const auto& t = config_.train;
  const int64_t dp_rank = place_.dp_rank, dp_size = place_.dp_size;
  auto train_data = std::make_shared<TokenDataset>(data_files(config_.data, "train"));
  data_.train = std::make_unique<DataLoader>(train_data, t.batch_size, t.seq_len, dp_rank, dp_size,
                                             t.seed, config_.data.shuffle);
  data_.train->set_vocab_size(config_.model.vocab_size());
  VESCALE_CHECK(data_.train->steps_per_epoch() >= 1, "data.train: ", train_data->size(),
                " tokens are too few for one ", "batch of ", t.batch_size, " x ", t.seq_len,
                " on each of ", dp_size, " data-parallel ranks");
  const bool has_val = !config_.data.val.empty() || config_.data.train.empty();
  if (!has_val) return;
  auto val_data = std::make_shared<TokenDataset>(data_files(config_.data, "val"));
  data_.val =
      std::make_unique<DataLoader>(val_data, t.batch_size, t.seq_len, dp_rank, dp_size, t.seed, false);
  data_.val->set_vocab_size(config_.model.vocab_size());
  if (data_.val->steps_per_epoch() < 1) {
    data_.val.reset();  // too small to evaluate on
    return;
  }
  // Now, not at the first evaluation (often the last step, before the final save): the
  // validation set is small, and every step after the last checkpoint would be lost.
  const int64_t batches = std::min(t.eval_steps, data_.val->steps_per_epoch());
  val_data->check_ids(0, batches * t.batch_size * dp_size * t.seq_len + 1,
                      config_.model.vocab_size(), "data.val");
}

Trainer::Reports::~Reports() = default;

Trainer::~Trainer() {
  hooks_.timeline.reset();
  optimizer_.reset();  // ShardedAdamW before the reducer it reads
  grads_.reset();      // ZeRO-3: whole parameters again
  forward_backward_.reset();
}

void Trainer::check_memory_fits() const {
  std::string where;
  const int local = dist::is_initialized() ? dist::launch_env().local_world_size : 1;
  const double available = rank_memory_bytes(place_.device, local, where);
  if (place_.mesh) {
    check_fits(config_, place_.mesh->shape(), available, where);
    return;
  }
  Config one = config_;  // one process: no plan is applied
  one.parallel.plan.clear();
  one.parallel.zero = 0;
  one.parallel.mesh = {{plan::kDataDim, 1}};
  check_fits(one, mesh::MeshShape(one.parallel.mesh, 1), available, where);
}

StepBatch Trainer::step_batch() const {
  return {config_.train.batch_size, microbatches(), place_.dp_size, config_.train.seq_len};
}

int64_t Trainer::resumed_step() const { return checkpoints_ ? checkpoints_->resumed_step() : 0; }

const std::string& Trainer::run_id() const {
  static const std::string none;
  return checkpoints_ ? checkpoints_->run_id() : none;
}

const parallel::GradReducer* Trainer::grad_reducer() const {
  return grads_ ? grads_->reducer() : nullptr;
}

void Trainer::save_checkpoint(int64_t steps_done) {
  VESCALE_CHECK(checkpoints_, "save_checkpoint: checkpoint.dir is not set");
  checkpoints_->stage(steps_done);
  if (!config_.checkpoint.async) checkpoints_->commit();
}

void Trainer::finish_checkpoint() {
  if (checkpoints_) checkpoints_->commit();
}

int64_t Trainer::microbatches() const { return forward_backward_->microbatches(); }

int64_t Trainer::tokens_per_step() const {
  const auto& t = config_.train;
  return t.batch_size * t.seq_len * microbatches() * place_.dp_size;
}

StepMetrics Trainer::step(int64_t step) {
  const auto& t = config_.train;
  const auto start = std::chrono::steady_clock::now();
  const SpanNames& names = span_names();
  timeline::Scope step_span(timeline::Kind::Step, names.step, step + 1);
  StepPhase phase(run_.doing);
  run_.doing = "starting the step";
  if (run_.step_hook) run_.step_hook(step + 1);
  dtensor::static_eager_step();  // replay (when on) restarts at the step's first call
  StepMetrics m;
  m.step = step + 1;
  m.lr = optim::lr_at({t.lr, t.min_lr, t.warmup_steps, t.steps, t.decay}, step);
  optimizer_->set_lr(m.lr);
  model_.module->train();
  dtensor::BackwardOnCallerThread same_thread;  // no hand-offs to autograd's "dtensor" thread
  m.loss = forward_backward_->train([this] { return data_.train->next(); });
  // Gradients to their parameters' placements: the buckets finish what backward launched.
  phase("reducing gradients", timeline::Kind::GradSync, names.grad_sync);
  if (grads_) grads_->finish();
  forward_backward_->after_reduction();
  // The whole gradient's norm, however it is sharded: with the loss, the one host read per step.
  phase("clipping gradients", timeline::Kind::Optimizer, names.clip);
  at::Tensor norm = optimizer_->clip_grad_norm_(t.grad_clip, forward_backward_->norm_across());
  m.grad_norm = norm.item<double>();
  m.param_norm = guard_->param_norm();
  check_guard(m);  // every rank holds the same values: all pass or all stop here
  // The parameters of the save in flight gave this loss: that checkpoint may become latest.
  if (checkpoints_ && checkpoints_->pending()) {
    phase("committing a checkpoint", timeline::Kind::Checkpoint, names.commit);
    checkpoints_->commit();
  }
  if (checkpoints_ && checkpoints_->pending_in_memory()) {
    phase("publishing the copy in memory", timeline::Kind::Checkpoint, names.commit);
    checkpoints_->commit_in_memory();
  }
  phase("optimizer step", timeline::Kind::Optimizer, names.optimizer);
  optimizer_->step();
  optimizer_->zero_grad();
  guard_->measure(*optimizer_, m.lr);
  if (!model_.moe.layers.empty()) {
    phase("balancing experts", timeline::Kind::Other, names.experts);
    balance_experts(m);
  }
  phase.end();
  report_.metrics->time(m, start);
  return m;
}

void Trainer::check_guard(const StepMetrics& m) {
  try {
    guard_->check(m.step, m.loss, m.grad_norm, m.param_norm);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "." +
                (checkpoints_ ? checkpoints_->last_good(m.step) : std::string()));
  }
}

double Trainer::evaluate() {
  VESCALE_CHECK(
      data_.val,
      "evaluate: no validation data (data.val names no files, or they hold less than a batch)");
  c10::NoGradGuard no_grad;
  model_.module->eval();
  data_.val->seek({});
  const int64_t n = std::min(config_.train.eval_steps, data_.val->steps_per_epoch());
  const double loss = forward_backward_->evaluate([this] { return data_.val->next(); }, n);
  model_.module->train();
  return loss;
}

std::vector<StepMetrics> Trainer::run() {
  const auto& t = config_.train;
  if (place_.rank == 0) {
    log::info("model " + config_.model.type + ": " +
              human(static_cast<double>(parameter_count(parameter_shapes(config_.model))), "") +
              " parameters; " + std::to_string(tokens_per_step()) + " tokens per step (" +
              std::to_string(sequences_per_step()) + " sequences of " + std::to_string(t.seq_len) +
              ": " + std::to_string(t.batch_size) + " x " + std::to_string(microbatches()) +
              " micro-batches x " + std::to_string(place_.dp_size) + " data ranks); " +
              std::to_string(t.steps) + " steps, dtype " +
              to_string(t.dtype) +
              (t.activation_checkpointing ? ", activation checkpointing" : ""));
    if (place_.mesh)
      if (const std::string c = context_summary(config_, place_.mesh->shape()); !c.empty())
        log::info(c);
  }
  std::vector<StepMetrics> all;
  const auto start = std::chrono::steady_clock::now();
  const int64_t resumed = resumed_step();
  if (resumed >= t.steps) {
    if (place_.rank == 0)
      log::info("nothing to do: the checkpoint is at step " + std::to_string(resumed) +
                " and train.steps is " + std::to_string(t.steps));
    return {};
  }
  // A failure is one line naming the step and what it was doing; a save in flight is dropped.
  auto guarded = [&](int64_t s, auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (checkpoints_) checkpoints_->abort();
      const std::string msg = message_of(e);
      if (msg.rfind("step ", 0) == 0) throw;
      // One line naming the step and the phase, a timeout included (its rank is in `msg`).
      const std::string where = "step " + std::to_string(s + 1) + ": " + run_.doing + ": ";
      if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(where + msg);
      throw Error(where + msg);
    }
  };
  for (int64_t s = resumed; s < t.steps; ++s) {
    StepMetrics m;
    int stop = 0;
    if (hooks_.timeline)
      guarded(s, [&] {
        run_.doing = "aligning the timeline's clocks";
        hooks_.timeline->before_step(s + 1);
      });
    guarded(s, [&] {
      // The previous step's save writes in the background; this step commits it once its loss
      // passed the guard. A step that fails throws before that, and the save is dropped.
      m = step(s);
      // Every rank stops after the same step, whichever got the signal. Collective.
      run_.doing = "agreeing on a stop";
      stop = static_cast<int>(dist::all_max(stop_requested()));
    });
    const bool last = s + 1 == t.steps || stop != 0;
    // Saved before the evaluation and the sample: a failure in either loses no trained step.
    if (checkpoints_ && checkpoints_->due(m.step, last)) {
      guarded(s, [&] {
        run_.doing = "saving a checkpoint";
        timeline::Scope span(timeline::Kind::Checkpoint, span_names().save);
        checkpoints_->stage(m.step);
        if (last) checkpoints_->commit();  // no next step to wait for
      });
    }
    if (checkpoints_ && !last && checkpoints_->due_in_memory(m.step)) {
      guarded(s, [&] {
        run_.doing = "keeping a copy in memory";
        timeline::Scope span(timeline::Kind::Checkpoint, span_names().save);
        checkpoints_->stage_in_memory(m.step);
      });
    }
    if (data_.val && ((t.eval_every > 0 && m.step % t.eval_every == 0) || s + 1 == t.steps)) {
      guarded(s, [&] {
        run_.doing = "evaluating";
        timeline::Scope span(timeline::Kind::Eval, span_names().eval);
        m.val_loss = evaluate();
      });
    }
    report_.metrics->step(m, last);
    dist::report_step(m.step);
    all.push_back(m);
    if (t.sample_every > 0 && (m.step % t.sample_every == 0 || last))
      guarded(s, [&] {
        run_.doing = "sampling";
        print_sample(m.step);
      });
    if (hooks_.timeline)
      guarded(s, [&] {
        run_.doing = "writing the timeline";
        if (auto summary = hooks_.timeline->after_step(m.step))
          report_.metrics->timeline(m.step, summary->to_json());
      });
    if (stop != 0) {
      run_.stopped_by = stop;
      if (place_.rank == 0)
        log::info(std::string(stop == SIGINT ? "SIGINT" : "SIGTERM") + ": stopped after step " +
                  std::to_string(m.step) +
                  (checkpoints_ ? " with a checkpoint; rerun the same command to resume" : ""));
      return all;
    }
  }
  finish_checkpoint();
  report_.metrics->done(all,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return all;
}

}  // namespace vescale::train
