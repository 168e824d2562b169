#include "vescale/parallel/context/context_parallel.h"

#include <torch/nn/module.h>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/nn/block_pattern.h"

namespace vescale::parallel::context {

std::vector<nn::HookHandle> attend_over_split_sequence(torch::nn::Module& model,
                                                       const std::string& pattern,
                                                       const SequenceSplit& split,
                                                       dist::ProcessGroup& group,
                                                       ContextAttention kind) {
  VESCALE_CHECK(!pattern.empty(),
                "context parallelism: the model names no attention cores "
                "(Model::attention_cores), so its attention cannot run over a split sequence");
  split.validate();
  VESCALE_CHECK(group.size() == split.cp, "context parallelism: the cp group has ", group.size(),
                " ranks, the split ", split.cp);
  std::vector<nn::HookHandle> handles;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    if (!nn::block_match(pattern, item.key())) continue;
    nn::ForwardHooks link;
    dist::ProcessGroup* g = &group;
    link.around = [split, g, kind, name = item.key()](const std::vector<at::Tensor>& in,
                                                      const nn::ForwardHooks::Forward&) {
      VESCALE_CHECK(in.size() == 3, "context parallelism: attention core '", name,
                    "' takes q, k, v; it got ", in.size(), " tensors");
      VESCALE_CHECK(!dtensor::is_dtensor(in[0]), "context parallelism: attention core '", name,
                    "' got DTensors (tensor parallelism); cp with tp is not supported yet");
      return kind == ContextAttention::Ring
                 ? ring_attention(in[0], in[1], in[2], split, *g, /*causal=*/true)
                 : allgather_attention(in[0], in[1], in[2], split, *g, /*causal=*/true);
    };
    handles.push_back(nn::add_forward_hook(*item.value(), nn::HookSlot::Context, std::move(link)));
  }
  VESCALE_CHECK(!handles.empty(),
                "context parallelism: no module matches the attention cores' "
                "pattern '",
                pattern, "'");
  return handles;
}

}  // namespace vescale::parallel::context
