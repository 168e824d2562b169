// This rank's pipeline stages run by the schedule (forward_backward.h, docs/pipeline.md): the
// stages were cut and parallelized by parallel::pipeline::PipelineStages (model_layout.h); here
// each stage's forward (autocast, the aux loss's running statistics), the loss on the last
// stage, and the cross-stage sums a step needs. make_forward_backward chooses it or the local
// one.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/timeline/recorder.h"
#include "vescale/train/forward_backward.h"

namespace vescale::train {
namespace {

namespace pp = parallel::pipeline;

class PipelineForwardBackward : public ForwardBackward {
 public:
  PipelineForwardBackward(Model& model, std::unique_ptr<pp::PipelineStages> stages,
                          const mesh::DeviceMesh& mesh, int world_rank, ForwardBackwardOptions o)
      : model_(model), stages_(std::move(stages)), world_rank_(world_rank), o_(std::move(o)) {
    const pp::PipelineStages& st = *stages_;
    std::vector<pp::StageForward> forwards;
    for (int s : st.schedule().stages_of(st.pipeline_rank())) {
      const int64_t begin = st.first_layer(s), end = st.end_layer(s);
      std::vector<std::string> names;
      for (int64_t l = begin; l < end; ++l) names.push_back(model_.layers[l].name);
      const bool any_block =
          end - begin > (begin == 0 ? 1 : 0) +
                            (end == static_cast<int64_t>(model_.layers.size()) ? 1 : 0);
      forwards.push_back(
          {s, [this, begin, end, names, any_block](const std::vector<at::Tensor>& in) {
             // As the local forward around the whole model (the loss stays fp32).
             Bf16Autocast autocast(o_.bf16, at::Device(o_.device).type());
             at::Tensor y = in.at(0);
             for (int64_t l = begin; l < end; ++l) y = model_.layers[l].forward(y, o_.positions);
             // The aux loss's running statistics: what came in plus this stage's.
             at::Tensor stats = in.size() > 1 ? in[1] : at::Tensor();
             if (model_.aux_over_layers.stats && any_block) {
               at::Tensor mine = model_.aux_over_layers.stats(names);
               stats = stats.defined() ? stats + mine : mine;
             }
             if (!stats.defined()) return std::vector<at::Tensor>{y};
             return std::vector<at::Tensor>{y, stats};
           }});
    }
    pp::RunnerOptions opts;
    if (o_.reducer) opts.set_grad_sync = [r = o_.reducer](bool sync) { r->set_sync(sync); };
    runner_ = std::make_unique<pp::PipelineRunner>(
        st.schedule(), mesh, st.dim(), std::move(forwards), &st.stage_mesh(), std::move(opts));
  }

  ~PipelineForwardBackward() override { runner_.reset(); }

  int64_t microbatches() const override { return stages_->schedule().microbatches; }

  double train(const NextBatch& next) override {
    return run(read(next, microbatches()), /*training=*/true);
  }

  double evaluate(const NextBatch& next, int64_t n) override {
    return run(read(next, n), /*training=*/false);
  }

  void after_reduction() override { stages_->reduce_shared_grads(); }
  void sum_over_layers(at::Tensor& t) override { stages_->sum_over_pipeline(t); }
  optim::SumAcross norm_across() override {
    return [this](const at::Tensor& sum_sq) { return stages_->sum_across_stages(sum_sq); };
  }
  const pp::Schedule* schedule() const override { return &stages_->schedule(); }
  const pp::RunnerStats* stats() const override { return &runner_->last_step(); }

 private:
  std::vector<DataLoader::Batch> read(const NextBatch& next, int64_t n) {
    if (o_.phase) o_.phase("reading the batch");
    static const uint32_t data = timeline::intern("data");
    timeline::Scope span(timeline::Kind::Data, data);
    std::vector<DataLoader::Batch> batches;
    for (int64_t i = 0; i < n; ++i) batches.push_back(next());
    return batches;
  }

  double run(const std::vector<DataLoader::Batch>& batches, bool training) {
    if (o_.phase) o_.phase("running the pipeline schedule");
    const at::Device dev(o_.device);
    const mesh::DeviceMesh* m = &stages_->stage_mesh();
    // Under context parallelism, this rank's tokens of each sequence.
    auto input = [&](int mb) {
      return to_model_input(batches.at(mb).inputs.to(dev), m, o_.positions);
    };
    auto loss = [&](const std::vector<at::Tensor>& outputs, int mb) {
      at::Tensor l =
          lm_loss(outputs.at(0), to_model_input(batches.at(mb).targets.to(dev), m, o_.positions));
      if (model_.aux_over_layers.loss && outputs.size() > 1)
        l = l + model_.aux_over_layers.loss(outputs[1]);
      return l;
    };
    at::Tensor sum = training ? runner_->train_step(input, loss)
                              : runner_->eval_step(input, loss, static_cast<int>(batches.size()));
    // The last stage's sum, to every rank (the log and the divergence guard read it on each).
    return stages_->last_stage_mean(sum, runner_->runs_last_stage(),
                                    static_cast<int64_t>(batches.size()), world_rank_);
  }

  Model& model_;
  std::unique_ptr<pp::PipelineStages> stages_;
  int world_rank_;
  ForwardBackwardOptions o_;
  std::unique_ptr<pp::PipelineRunner> runner_;
};

}  // namespace

std::unique_ptr<ForwardBackward> make_forward_backward(Model& model,
                                                      std::unique_ptr<pp::PipelineStages> stages,
                                                      int world_rank, ForwardBackwardOptions o) {
  if (!stages) return local_forward_backward(model, std::move(o));
  const mesh::DeviceMesh& mesh = *o.mesh;
  return std::make_unique<PipelineForwardBackward>(model, std::move(stages), mesh, world_rank,
                                                   std::move(o));
}

}  // namespace vescale::train
