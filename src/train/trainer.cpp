// The training loop: the Trainer built from a config, its steps, evaluation and run(). Its
// checkpoints are in trainer_checkpoint.cpp, what it reports in metrics_logger.cpp, a step's
// micro-batches in forward_backward.h, the data files in data_files.cpp, --dry-run in
// dry_run.cpp.
#include "vescale/train/trainer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>

#include "shared/meta_device.h"
#include "train/trainer_internal.h"
#include "train/trainer_timeline.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/parallel/grad_reduce.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/parallel/grad_layout.h"
#include "vescale/parallel/sharded_adamw.h"
#include "vescale/parallel/sharded_parameters.h"
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
#include "vescale/train/activation_checkpoint.h"
#include "vescale/train/hf_weights.h"
#include "vescale/train/peak_flops.h"
#include "vescale/train/forward_backward.h"
#include "vescale/train/metrics_logger.h"
#include "vescale/train/validate.h"
#include "vescale/kernels/host_memory.h"
#include "vescale/timeline/recorder.h"
#include "vescale/train/stop_signal.h"

namespace vescale::train {
namespace {

// The config's plan (every parameter replicated without one). The trainer's constructor meets
// parallelize() with it (or setup_pipeline, under a "pipeline" section); everything else in
// this file is plain aten code that works unchanged on DTensors. The parameters become DTensors
// and the model's own init reruns on them through the Philox RNG, so the initial weights are
// bitwise the same for every mesh, world size and plan. On one device the parameters stay plain
// tensors (after that same init): nothing to distribute, no DTensor dispatch per op.
plan::Plan load_plan(const Config& config, const mesh::DeviceMesh& mesh) {
  plan::Plan plan(mesh.dim_names());
  if (config.parallel.plan.empty()) {
    plan.shard("*", dtensor::Placements(mesh.ndim(), dtensor::Replicate()));
  } else {
    plan = plan::Plan::from_json_file(config.parallel.plan);
  }
  return plan;
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

// ===================================================================================

}  // namespace

Trainer::Trainer(Config config, std::optional<mesh::DeviceMesh> mesh)
    : config_(std::move(config)), mesh_(std::move(mesh)) {
  const auto& t = config_.train;
  if (mesh_) {
    rank_ = mesh_->rank();
    world_size_ = mesh_->size();
    const auto shard = data_shard(*mesh_);  // dp, and ep (docs/moe.md)
    dp_rank_ = shard.rank, dp_size_ = shard.size;
    device_ = dist::device_string();
  }
  // What can be checked without the world is checked as vescale-train checks it before the world.
  if (mesh_) validate(config_, world_size_);
  on_all_ranks([&] { check_outputs(); });
  on_all_ranks([&] { check_memory_fits(); });  // hosts differ: one short rank stops them all
  // One seed for everything: libtorch's generator (model init, plain-tensor dropout) and ours.
  torch::manual_seed(t.seed);
  random::manual_seed(t.seed);

  if (device_ == "cpu") kernels::cache_host_memory();
  std::optional<plan::Plan> plan_in;
  if (mesh_) plan_in = load_plan(config_, *mesh_);
  if (plan_in && plan_in->pipeline()) {
    // A pipeline rank keeps only its stages: the model is built without memory, and
    // setup_pipeline gives this rank's parameters (and the buffers) storage on its device.
    models::MetaDeviceScope meta;
    model_ = build_model(config_.model);
  } else {
    model_ = build_model(config_.model);
    if (device_ != "cpu") model_.module->to(at::Device(device_));
  }
  int64_t zero = 0;
  // Under a pipeline plan: this rank's stages, until the forward-backward takes them.
  std::unique_ptr<parallel::pipeline::PipelineStages> stages;
  if (!mesh_ && !config_.model.init_from.empty())
    load_hf_weights(config_.model.init_from, model_, config_.model);
  if (mesh_) {
    const plan::Plan& plan = *plan_in;
    if (plan.pipeline()) {
      stages = cut_stages(plan);  // this rank's stages, parallelized on the stage's mesh
      const auto shard = data_shard(stages->stage_mesh());
      dp_rank_ = shard.rank, dp_size_ = shard.size;
    } else {
      parallel::parallelize(*model_.module, plan, *mesh_,
                            {.init = model_.init, .plain_on_one_device = true});
    }
    // Before the reducer and the optimizer see them (ZeRO-3 reshapes the parameters' storage).
    if (!config_.model.init_from.empty())
      load_hf_weights(config_.model.init_from, model_, config_.model);
    // Bucketed reduction (docs/parallel.md); "per_param" keeps parallel::reduce_gradients.
    zero = zero_stage(config_.parallel, &plan);
    // (validate() refused ZeRO without buckets, and ZeRO-3 under a pipeline.)
    VESCALE_CHECK(!stages || zero == 0 || !stages->has_shared_weights(),
                  "ZeRO with weights tied across ",
                  "pipeline stages (tied embeddings) is not supported yet; set parallel.zero=0 or "
                  "untie them");
    // One device has no gradient to reduce (and its parameters are plain tensors).
    const mesh::DeviceMesh& grad_mesh = stages ? stages->stage_mesh() : *mesh_;
    reduce_per_param_ =
        grad_mesh.size() > 1 && config_.parallel.grad_reduce == GradReduce::PerParam;
    if (grad_mesh.size() > 1 && config_.parallel.grad_reduce != GradReduce::PerParam) {
      // The gradient layout, before step 1 (docs/parallel.md): buckets, and ZeRO's slices.
      auto layout = parallel::GradLayoutOptions::from_plan(plan.grad_reduce());
      layout.zero = static_cast<int>(zero);
      if (zero >= 3) layout.unit_pattern = model_.block_pattern;  // one gather per block
      grad_layout_ =
          std::make_unique<parallel::GradLayout>(*model_.module, grad_mesh, plan, layout);
      reducer_ = std::make_unique<parallel::GradReducer>(
          *grad_layout_,
          parallel::GradReducerOptions{
              .overlap = config_.parallel.grad_reduce == GradReduce::Overlap,
              .reduce_bf16 = config_.parallel.reduce_dtype == DType::Bf16});
      // ZeRO-3: the blocks' parameters become slices before their first use.
      if (zero >= 3) sharded_ = std::make_unique<parallel::ShardedParameters>(*grad_layout_);
    }
  }
  dtensor::set_static_eager(config_.parallel.static_eager);
  // A pipeline stage may hold no block (only the embedding, say).
  if (t.activation_checkpointing && (!stages || has_block(*model_.module, model_.block_pattern)))
    checkpointed_ = enable_activation_checkpointing(*model_.module, model_.block_pattern,
                                                    model_.block_side_outputs);
  // Around the checkpointing hook, so a block's forward span is the forward it runs.
  if (config_.log.timeline.on())
    timeline_ = std::make_unique<TimelineWindow>(config_, mesh_ ? &*mesh_ : nullptr, *model_.module,
                                                 model_.block_pattern);

  optim::NamedParams named;
  for (const auto& item : model_.module->named_parameters())
    named.emplace_back(item.key(), item.value());
  std::vector<at::Tensor> params;  // the model's order, for the norm's summation
  for (const auto& [n, p] : named) params.push_back(p);
  const optim::AdamWOptions adamw{
      .lr = t.lr, .beta1 = t.betas[0], .beta2 = t.betas[1], .eps = t.eps};
  if (zero >= 1 && reducer_) {
    optimizer_ = std::make_unique<parallel::ShardedAdamW>(
        *reducer_, sharded_.get(), optim::decay_groups(named, t.weight_decay), adamw);
  } else {
    optimizer_ =
        std::make_unique<optim::AdamW>(optim::decay_groups(named, t.weight_decay), adamw, params);
  }
  ForwardBackwardOptions fb{mesh_ ? &*mesh_ : nullptr,
                            device_,
                            t.dtype == DType::Bf16,
                            t.grad_accum,
                            reducer_.get(),
                            [this](const char* p) { doing_ = p; }};
  forward_backward_ = stages ? pipeline_forward_backward(model_, std::move(stages), *mesh_,
                                                         rank_, std::move(fb))
                             : local_forward_backward(model_, std::move(fb));

  auto train_data = std::make_shared<TokenDataset>(data_files(config_.data, "train"));
  train_loader_ = std::make_unique<DataLoader>(train_data, t.batch_size, t.seq_len, dp_rank_,
                                               dp_size_, t.seed, config_.data.shuffle);
  train_loader_->set_vocab_size(config_.model.vocab_size());
  VESCALE_CHECK(train_loader_->steps_per_epoch() >= 1, "data.train: ", train_data->size(),
                " tokens are too few for one ", "batch of ", t.batch_size, " x ", t.seq_len,
                " on each of ", dp_size_, " data-parallel ranks");
  const bool has_val = !config_.data.val.empty() || config_.data.train.empty();
  if (has_val) {
    auto val_data = std::make_shared<TokenDataset>(data_files(config_.data, "val"));
    val_loader_ = std::make_unique<DataLoader>(val_data, t.batch_size, t.seq_len, dp_rank_,
                                               dp_size_, t.seed, false);
    val_loader_->set_vocab_size(config_.model.vocab_size());
    if (val_loader_->steps_per_epoch() < 1) val_loader_.reset();  // too small to evaluate on
    // Now, not at the first evaluation (often the last step, before the final save): the
    // validation set is small, and every step after the last checkpoint would be lost.
    if (val_loader_) {
      const int64_t batches = std::min(t.eval_steps, val_loader_->steps_per_epoch());
      val_data->check_ids(0, batches * t.batch_size * dp_size_ * t.seq_len + 1,
                          config_.model.vocab_size(), "data.val");
    }
  }
  guard_ = std::make_unique<DivergenceGuard>(DivergenceGuardOptions{
      t.max_loss_spike, t.warmup_steps, config_.model.vocab_size(), t.lr, t.grad_clip});
  if (!config_.checkpoint.dir.empty()) {
    saver_ = std::make_unique<checkpoint::AsyncSave>();
    if (config_.checkpoint.resume) {
      if (auto folder = checkpoint::latest(config_.checkpoint.dir)) resume_from(*folder);
    }
    // Resumed: the checkpoint's run goes on. Fresh: a new id, the same on every rank.
    if (!resumed_) run_id_ = dist::all_gather_text(rank_ == 0 ? new_run_id() : "").front();
  }
  measure_params();  // the guard's first reference: the weights step 1 runs with
  // Every rank at once: on a CPU the measured GEMM peak is each rank's share of the cores.
  metrics_ = std::make_unique<MetricsLogger>(
      config_, MetricsLogger::Run{rank_, world_size_, tokens_per_step(),
                                  flops_per_token(config_.model, t.seq_len), resumed_step_, device_,
                                  model_.moe.layers});
}

Trainer::~Trainer() {
  timeline_.reset();
  optimizer_.reset();  // ZeRO before the reducer it reads
  sharded_.reset();    // ZeRO-3: whole parameters again
  forward_backward_.reset();
  reducer_.reset();
  grad_layout_.reset();
}

void Trainer::check_memory_fits() const {
  std::string where;
  const int local = dist::is_initialized() ? dist::launch_env().local_world_size : 1;
  const double available = rank_memory_bytes(device_, local, where);
  if (mesh_) {
    check_fits(config_, mesh_->shape(), available, where);
    return;
  }
  Config one = config_;  // one process: no plan is applied
  one.parallel.plan.clear();
  one.parallel.zero = 0;
  one.parallel.mesh = {{plan::kDataDim, 1}};
  check_fits(one, mesh::MeshShape(one.parallel.mesh, 1), available, where);
}

void Trainer::measure_params() {
  param_sq_ = optimizer_->param_sum_of_squares();
  if (!param_sq_.defined()) return;
  param_sq_ = param_sq_.reshape({1});
  if (world_size_ > 1) param_sq_work_ = dist::world().all_reduce(param_sq_);
}

double Trainer::read_param_norm() {
  if (!param_sq_.defined()) return 0;
  param_sq_work_.wait();
  param_sq_work_ = {};
  return std::sqrt(param_sq_.item<double>());
}

std::unique_ptr<parallel::pipeline::PipelineStages> Trainer::cut_stages(const plan::Plan& plan) {
  std::vector<parallel::pipeline::LayerModules> layers;
  for (const auto& l : model_.pipeline_layers) layers.push_back({l.name, l.modules});
  auto stages = std::make_unique<parallel::pipeline::PipelineStages>(model_.module, layers, plan,
                                                                     *mesh_, device_, model_.init);
  model_.module = stages->root();
  log::info(stages->describe(layers));
  return stages;
}

int64_t Trainer::microbatches() const { return forward_backward_->microbatches(); }

const parallel::pipeline::Schedule* Trainer::pipeline_schedule() const {
  return forward_backward_->schedule();
}

const parallel::pipeline::RunnerStats* Trainer::pipeline_stats() const {
  return forward_backward_->stats();
}

int64_t Trainer::tokens_per_step() const {
  const auto& t = config_.train;
  return t.batch_size * t.seq_len * microbatches() * dp_size_;
}

StepMetrics Trainer::step(int64_t step) {
  const auto& t = config_.train;
  const auto start = std::chrono::steady_clock::now();
  const SpanNames& names = span_names();
  timeline::Scope step_span(timeline::Kind::Step, names.step, step + 1);
  doing_ = "starting the step";
  if (step_hook_) step_hook_(step + 1);
  dtensor::static_eager_step();  // replay (when on) restarts at the step's first call
  const double lr = optim::lr_at({t.lr, t.min_lr, t.warmup_steps, t.steps, t.decay}, step);
  optimizer_->set_lr(lr);
  model_.module->train();
  dtensor::BackwardOnCallerThread
      same_thread;  // no hand-offs to autograd's "dtensor" device thread
  const double loss = forward_backward_->train([this] { return train_loader_->next(); });
  // Gradients with other placements than their parameters (Partial over dp, or over tp for
  // replicated weights fed sequence shards) are reduced: by the buckets (most of them already
  // launched during backward), or one collective per parameter.
  doing_ = "reducing gradients";
  std::optional<timeline::Scope> phase;
  phase.emplace(timeline::Kind::GradSync, names.grad_sync);
  if (reducer_) {
    reducer_->finish();
  } else if (reduce_per_param_) {
    parallel::reduce_gradients(*model_.module);
  }
  forward_backward_->after_reduction();
  // The norm of the whole gradient, however it is sharded (ZeRO holds slices of it).
  doing_ = "clipping gradients";
  phase.reset();
  phase.emplace(timeline::Kind::Optimizer, names.clip);
  at::Tensor norm = optimizer_->clip_grad_norm_(t.grad_clip, forward_backward_->norm_across());
  // The one host read per step: the loss and the norm, for the log and the guard.
  StepMetrics m;
  m.step = step + 1;
  m.lr = lr;
  m.loss = loss;
  m.grad_norm = norm.item<double>();
  m.param_norm = read_param_norm();
  // Every rank holds the same loss and norms, so all pass or all stop here.
  try {
    guard_->check({m.step, m.loss, m.grad_norm, prev_lr_, m.param_norm});
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "." + last_good_checkpoint(m.step));
  }
  // The parameters of the save in flight gave this loss: that checkpoint may become latest.
  phase.reset();
  doing_ = "committing a checkpoint";
  {
    std::optional<timeline::Scope> span;
    if (saver_ && saver_->pending()) span.emplace(timeline::Kind::Checkpoint, names.commit);
    finish_checkpoint();
  }
  doing_ = "optimizer step";
  phase.emplace(timeline::Kind::Optimizer, names.optimizer);
  optimizer_->step();
  optimizer_->zero_grad();
  prev_lr_ = lr;
  measure_params();
  phase.reset();
  doing_ = "balancing experts";
  {
    std::optional<timeline::Scope> span;
    if (!model_.moe.layers.empty()) span.emplace(timeline::Kind::Other, names.experts);
    balance_experts(m);
  }
  m.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  m.tokens_per_s = static_cast<double>(tokens_per_step()) / (m.step_ms / 1000.0);
  m.mfu = metrics_->mfu(m.tokens_per_s);
  return m;
}

double Trainer::evaluate() {
  VESCALE_CHECK(
      val_loader_,
      "evaluate: no validation data (data.val names no files, or they hold less than a batch)");
  c10::NoGradGuard no_grad;
  model_.module->eval();
  val_loader_->seek({});
  const int64_t n = std::min(config_.train.eval_steps, val_loader_->steps_per_epoch());
  const double loss = forward_backward_->evaluate([this] { return val_loader_->next(); }, n);
  model_.module->train();
  return loss;
}

std::vector<StepMetrics> Trainer::run() {
  const auto& t = config_.train;
  if (rank_ == 0) {
    log::info("model " + config_.model.type + ": " +
              human(static_cast<double>(parameter_count(parameter_shapes(config_.model))), "") +
              " parameters; " + std::to_string(tokens_per_step()) + " tokens per step (" +
              std::to_string(t.batch_size) + " x " + std::to_string(t.seq_len) + " x " +
              std::to_string(microbatches()) +
              (forward_backward_->schedule() ? " micro-batches x " : " accum x ") +
              std::to_string(dp_size_) + " dp); " + std::to_string(t.steps) + " steps, dtype " +
              to_string(t.dtype) +
              (t.activation_checkpointing ? ", activation checkpointing" : ""));
  }
  std::vector<StepMetrics> all;
  const auto start = std::chrono::steady_clock::now();
  if (resumed_step_ >= t.steps) {
    if (rank_ == 0)
      log::info("nothing to do: the checkpoint is at step " + std::to_string(resumed_step_) +
                " and train.steps is " + std::to_string(t.steps));
    return {};
  }
  // A failure is one line naming the step and what it was doing; a save in flight is dropped.
  auto guarded = [&](int64_t s, auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      if (saver_) saver_->abort();
      const std::string msg = message_of(e);
      if (msg.rfind("step ", 0) == 0) throw;
      // One line naming the step and the phase, a timeout included (its rank is in `msg`).
      const std::string where = "step " + std::to_string(s + 1) + ": " + doing_ + ": ";
      if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(where + msg);
      throw Error(where + msg);
    }
  };
  for (int64_t s = resumed_step_; s < t.steps; ++s) {
    StepMetrics m;
    int stop = 0;
    if (timeline_)
      guarded(s, [&] {
        doing_ = "aligning the timeline's clocks";
        timeline_->before_step(s + 1);
      });
    guarded(s, [&] {
      // The previous step's save writes in the background; this step commits it once its loss
      // passed the guard. A step that fails throws before that, and the save is dropped.
      m = step(s);
      // Every rank stops after the same step, whichever got the signal. Collective.
      doing_ = "agreeing on a stop";
      stop = static_cast<int>(dist::all_max(stop_requested()));
    });
    const bool last = s + 1 == t.steps || stop != 0;
    // Saved before the evaluation and the sample: a failure in either loses no trained step.
    const auto& ck = config_.checkpoint;
    if (saver_ && ((ck.every > 0 && m.step % ck.every == 0) || last)) {
      guarded(s, [&] {
        doing_ = "saving a checkpoint";
        timeline::Scope span(timeline::Kind::Checkpoint, span_names().save);
        stage_checkpoint(m.step);
        if (last) finish_checkpoint();  // no next step to wait for
      });
    }
    if (val_loader_ && ((t.eval_every > 0 && m.step % t.eval_every == 0) || s + 1 == t.steps)) {
      guarded(s, [&] {
        doing_ = "evaluating";
        timeline::Scope span(timeline::Kind::Eval, span_names().eval);
        m.val_loss = evaluate();
      });
    }
    metrics_->step(m, last);
    all.push_back(m);
    if (t.sample_every > 0 && (m.step % t.sample_every == 0 || last))
      guarded(s, [&] {
        doing_ = "sampling";
        print_sample(m.step);
      });
    if (timeline_)
      guarded(s, [&] {
        doing_ = "writing the timeline";
        if (auto summary = timeline_->after_step(m.step))
          metrics_->timeline(m.step, summary->to_json());
      });
    if (stop != 0) {
      stopped_by_ = stop;
      if (rank_ == 0)
        log::info(std::string(stop == SIGINT ? "SIGINT" : "SIGTERM") + ": stopped after step " +
                  std::to_string(m.step) +
                  (saver_ ? " with a checkpoint; rerun the same command to resume" : ""));
      return all;
    }
  }
  finish_checkpoint();
  metrics_->done(all,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return all;
}

}  // namespace vescale::train
