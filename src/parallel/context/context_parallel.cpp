#include "vescale/parallel/context/context_parallel.h"

#include <torch/nn/module.h>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/nn/block_pattern.h"

namespace vescale::parallel::context {

namespace {

// q [B, H, T, D], k and v [B, Hkv, T, D] as DTensors: each rank's shard holds its batch rows and
// heads of its tokens (the sequence is split over cp outside the DTensor's view, so dim 2 is
// whole to it). Attention is independent per batch row and head, so it runs on the shards.
template <class Attend>
at::Tensor on_local_shards(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::string& name, const Attend& attend) {
  const auto& spec = dtensor::spec_of(q);
  for (const auto* t : {&q, &k, &v}) {
    VESCALE_CHECK(dtensor::is_dtensor(*t) && dtensor::spec_of(*t).placements == spec.placements,
                  "context parallelism: attention core '", name,
                  "' got q, k and v in different layouts; give them one plan entry");
    for (const auto& p : spec.placements)
      VESCALE_CHECK(p.is_replicate() || p.is_shard(0) || p.is_shard(1),
                    "context parallelism: attention core '", name, "' got ", dtensor::describe(*t),
                    "; context parallelism needs q, k and v sharded by batch (dim 0) or heads "
                    "(dim 1) only: give the attention module's input Replicate or a head shard");
  }
  at::Tensor out = attend(dtensor::to_local(q), dtensor::to_local(k), dtensor::to_local(v));
  auto shape = q.sizes().vec();
  shape[3] = v.size(3);
  return dtensor::from_local(out, spec.mesh, spec.placements, shape);
}

}  // namespace

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
      auto attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return kind == ContextAttention::Ring
                   ? ring_attention(q, k, v, split, *g, /*causal=*/true)
                   : allgather_attention(q, k, v, split, *g, /*causal=*/true);
      };
      if (!dtensor::is_dtensor(in[0])) return attend(in[0], in[1], in[2]);
      return on_local_shards(in[0], in[1], in[2], name, attend);
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
