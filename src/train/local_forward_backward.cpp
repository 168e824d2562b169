// The whole model on each micro-batch in turn (forward_backward.h).
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "train/trainer_internal.h"
#include "vescale/parallel/grad_reducer.h"
#include "vescale/timeline/recorder.h"
#include "vescale/train/forward_backward.h"

namespace vescale::train {
namespace {

struct Spans {
  uint32_t data = timeline::intern("data"), forward = timeline::intern("forward"),
           loss = timeline::intern("loss"), backward = timeline::intern("backward");
};
const Spans& spans() {
  static const Spans s;
  return s;
}

class LocalForwardBackward : public ForwardBackward {
 public:
  LocalForwardBackward(Model& model, ForwardBackwardOptions o) : model_(model), o_(std::move(o)) {}

  int64_t microbatches() const override { return o_.grad_accum; }

  double train(const NextBatch& next) override {
    at::Tensor loss_sum;
    for (int64_t micro = 0; micro < o_.grad_accum; ++micro) {
      // Only the last micro-batch's backward reduces; the others accumulate Partial grads.
      if (o_.reducer) o_.reducer->set_sync(micro + 1 == o_.grad_accum);
      phase("reading the batch");
      const auto batch = [&] {
        timeline::Scope span(timeline::Kind::Data, spans().data);
        return next();
      }();
      phase("forward");
      at::Tensor loss = loss_of(batch);
      phase("backward");
      {
        timeline::Scope span(timeline::Kind::Backward, spans().backward);
        (loss / static_cast<double>(o_.grad_accum)).backward();
        timeline::discard_open();  // a block whose input needed no gradient left its span open
      }
      loss_sum = loss_sum.defined() ? loss_sum + loss.detach() : loss.detach();
    }
    return (loss_sum / static_cast<double>(o_.grad_accum)).item<double>();
  }

  double evaluate(const NextBatch& next, int64_t n) override {
    at::Tensor sum;
    for (int64_t i = 0; i < n; ++i) {
      at::Tensor loss = loss_of(next());
      sum = sum.defined() ? sum + loss : loss;
    }
    return (sum / static_cast<double>(n)).item<double>();
  }

 private:
  void phase(const char* p) const {
    if (o_.phase) o_.phase(p);
  }

  // Under context parallelism each rank forwards its tokens of every sequence at their global
  // positions; to the model's mesh (cp joined to dp) they are rows of their own, so the loss is
  // the mean over every token of the batch.
  at::Tensor loss_of(const DataLoader::Batch& batch) {
    const at::Device dev(o_.device);
    at::Tensor inputs = to_model_input(batch.inputs.to(dev), o_.mesh, o_.positions);
    at::Tensor targets = to_model_input(batch.targets.to(dev), o_.mesh, o_.positions);
    at::Tensor logits;
    {
      timeline::Scope span(timeline::Kind::Forward, spans().forward);
      Bf16Autocast autocast(o_.bf16, dev.type());
      logits =
          o_.positions.defined() ? model_.forward_at(inputs, o_.positions) : model_.forward(inputs);
    }
    timeline::Scope span(timeline::Kind::Loss, spans().loss);
    at::Tensor loss = lm_loss(logits, targets);
    if (model_.aux_loss) loss = loss + model_.aux_loss();
    return loss;
  }

  Model& model_;
  ForwardBackwardOptions o_;
};

}  // namespace

std::unique_ptr<ForwardBackward> local_forward_backward(Model& model, ForwardBackwardOptions o) {
  return std::make_unique<LocalForwardBackward>(model, std::move(o));
}

}  // namespace vescale::train
