// Internal: helpers the trainer's files share.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"
#include "vescale/tokenizer/text_tokenizer.h"
#include "vescale/train/config.h"
#include "vescale/train/forward_backward.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/model_input.h"
#include "vescale/train/trainer.h"

namespace vescale::train {

// train.sample_every's single-process copy of the model on rank 0, and the tokenizer.
struct Trainer::Sampler {
  Model model;
  vescale::tokenizer::TextTokenizer tokenizer;
};

// A folder the run will write into: made if missing, then a block written, synced and removed
// in it. Throws naming `field` and the fix (a full disk says so).
void check_writable_dir(const std::string& dir, const std::string& field);

// An exception's message without libtorch's C++ stack (kept at --log-level debug).
std::string message_of(const std::exception& e);

// Runs `f` on every rank; when it throws on any, it throws on every rank: the failing rank its
// own error, the others that rank's message. So no rank goes on (say, logs success, or waits in
// the next collective) while another has failed. Collective.
void on_all_ranks(const std::function<void()>& f);

// The ZeRO stage: the config's, else the plan's; both set must agree. `plan` may be null.
int64_t zero_stage(const ParallelConfig& parallel, const plan::Plan* plan);

// This rank's block of the batch and the number of blocks: row-major over the data dims
// (plan::ParallelDims::data: dp, and ep, whose ranks hold other tokens; docs/moe.md) in mesh
// order, the order a DTensor Shard(0) over them follows.
struct DataShard {
  int64_t rank = 0, size = 1;
};
DataShard data_shard(const mesh::DeviceMesh& mesh);

// bf16 autocast on `device` for the scope when `on` (the trainer's train.dtype=bf16): the
// whole model's forward, or a pipeline stage's; disabled and its cache cleared on exit, also
// when the forward throws.
// make_forward_backward's local case (forward_backward.h), in local_forward_backward.cpp.
std::unique_ptr<ForwardBackward> local_forward_backward(Model& model, ForwardBackwardOptions o);

class Bf16Autocast {
 public:
  Bf16Autocast(bool on, at::DeviceType device);
  ~Bf16Autocast();
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool on_;
  at::DeviceType device_;
};

// The next-token loss in fp32 whatever the compute dtype (fused on CPU: kernels/cross_entropy.h):
// logits [B, T, V], targets [B, T].
at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets);

// 1234567 -> "1.23M"; seconds -> "h:mm:ss".
std::string human(double x, const char* unit);
std::string gib(double bytes);  // "12.34 GiB"
std::string hms(double seconds);

}  // namespace vescale::train
