// The trainer under a pipeline plan (docs/pipeline.md): the model's layers cut into stages,
// this rank's stages kept (the other stages' parameters on the meta device), the schedule run
// by parallel::pipeline::PipelineRunner, then the usual gradient reduction over dp, the
// weights tied across stages summed, the norm taken over every stage, and the loss sent from
// the last stage to every rank.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <set>

#include "train/trainer_internal.h"
#include "train/trainer_pipeline.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/parallel/pipeline/pipeline_stages.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/trainer.h"

namespace vescale::train {
bool has_block(torch::nn::Module& root, const std::string& pattern) {
  for (const auto& m : root.named_modules("", false))
    if (component_match(pattern, m.key())) return true;
  return false;
}

int64_t Trainer::microbatches() const {
  return pipeline_ ? pipeline_->stages->schedule().microbatches : config_.train.grad_accum;
}

const parallel::pipeline::Schedule* Trainer::pipeline_schedule() const {
  return pipeline_ ? &pipeline_->stages->schedule() : nullptr;
}

const parallel::pipeline::RunnerStats* Trainer::pipeline_stats() const {
  return pipeline_ ? &pipeline_->runner->last_step() : nullptr;
}

bool Trainer::has_shared_weights() const {
  return pipeline_ && pipeline_->stages->has_shared_weights();
}

const mesh::DeviceMesh& Trainer::stage_mesh() const { return pipeline_->stages->stage_mesh(); }

void Trainer::setup_pipeline(const plan::Plan& plan) {
  namespace pp = parallel::pipeline;
  const plan::PipelineSpec& spec = *plan.pipeline();
  VESCALE_CHECK(!model_.pipeline_layers.empty(), "model.type '", config_.model.type,
                "' cannot be pipelined yet (its builder lists no pipeline layers); use a plan "
                "without \"pipeline\"");
  const auto& t = config_.train;
  VESCALE_CHECK(t.grad_accum == 1 || t.grad_accum == spec.microbatches,
                "train.grad_accum=", t.grad_accum, " but plan '", plan.source(),
                "': pipeline.microbatches=", spec.microbatches,
                ": a pipeline's micro-batches are the step's accumulation; set train.grad_accum "
                "to 1 (or to the same number)");
  auto p = std::make_unique<PipelineTraining>();
  for (const auto& l : model_.pipeline_layers) p->layers.push_back({l.name, l.modules});
  p->stages = std::make_unique<pp::PipelineStages>(*model_.module, p->layers, plan, *mesh_, device_,
                                                   model_.init);
  p->full_model = model_.module;
  model_.module = p->stages->root();
  const auto shard = data_shard(p->stages->stage_mesh());
  dp_rank_ = shard.rank, dp_size_ = shard.size;
  log::info(p->stages->describe(p->layers));
  pipeline_ = std::move(p);
}

void Trainer::start_pipeline_runner() {
  namespace pp = parallel::pipeline;
  PipelineTraining& p = *pipeline_;
  const pp::PipelineStages& st = *p.stages;
  std::vector<pp::StageForward> forwards;
  for (int s : st.schedule().stages_of(st.pipeline_rank())) {
    const int64_t begin = st.first_layer(s), end = st.end_layer(s);
    const bool bf16 = config_.train.dtype == DType::Bf16;
    const at::DeviceType dt = at::Device(device_).type();
    std::vector<std::string> names;
    for (int64_t l = begin; l < end; ++l) names.push_back(model_.pipeline_layers[l].name);
    const bool any_block =
        end - begin >
        (begin == 0 ? 1 : 0) + (end == static_cast<int64_t>(model_.pipeline_layers.size()) ? 1 : 0);
    forwards.push_back(
        {s, [this, begin, end, bf16, dt, names, any_block](const std::vector<at::Tensor>& in) {
           // As loss_of around the whole model (the loss stays fp32).
           Bf16Autocast autocast(bf16, dt);
           at::Tensor y = in.at(0);
           for (int64_t l = begin; l < end; ++l) y = model_.pipeline_layers[l].forward(y);
           // The aux loss's running statistics: what came in plus this stage's.
           at::Tensor stats = in.size() > 1 ? in[1] : at::Tensor();
           if (model_.pipeline_aux.stats && any_block) {
             at::Tensor mine = model_.pipeline_aux.stats(names);
             stats = stats.defined() ? stats + mine : mine;
           }
           if (!stats.defined()) return std::vector<at::Tensor>{y};
           return std::vector<at::Tensor>{y, stats};
         }});
  }
  pp::RunnerOptions opts;
  if (reducer_) opts.set_grad_sync = [r = reducer_.get()](bool sync) { r->set_sync(sync); };
  p.runner = std::make_unique<pp::PipelineRunner>(
      st.schedule(), *mesh_, st.dim(), std::move(forwards), &st.stage_mesh(), std::move(opts));
  // The norm over every stage.
  optimizer_->set_norm_across(
      [this](const at::Tensor& sum_sq) { return pipeline_->stages->sum_across_stages(sum_sq); });
}

double Trainer::pipeline_forward_backward(const std::vector<DataLoader::Batch>& batches,
                                          bool training) {
  PipelineTraining& p = *pipeline_;
  const at::Device dev(device_);
  const mesh::DeviceMesh* m = &p.stages->stage_mesh();
  auto input = [&](int mb) { return to_model_input(batches.at(mb).inputs.to(dev), m); };
  auto loss = [&](const std::vector<at::Tensor>& outputs, int mb) {
    at::Tensor l = lm_loss(outputs.at(0), to_model_input(batches.at(mb).targets.to(dev), m));
    if (model_.pipeline_aux.loss && outputs.size() > 1)
      l = l + model_.pipeline_aux.loss(outputs[1]);
    return l;
  };
  at::Tensor sum = training ? p.runner->train_step(input, loss)
                            : p.runner->eval_step(input, loss, static_cast<int>(batches.size()));
  // The last stage's sum, to every rank (the log and the divergence guard read it on each).
  return p.stages->last_stage_mean(sum, p.runner->runs_last_stage(),
                                   static_cast<int64_t>(batches.size()), rank_);
}

void Trainer::reduce_shared_weights() { pipeline_->stages->reduce_shared_grads(); }

}  // namespace vescale::train
