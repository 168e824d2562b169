// The mixture-of-experts boundary (vescale/parallel/expert/expert_parallel.h).
#include "vescale/parallel/expert/expert_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <atomic>
#include <numeric>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/process_group.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/kernels/expert_routing.h"
#include "vescale/nn/module_hooks.h"
#include "vescale/nn/routed_experts.h"
#include "vescale/plan/parallelize.h"
#include "vescale/timeline/recorder.h"

namespace vescale::parallel::expert {
namespace {

using dtensor::Placement;
using dtensor::Placements;

struct Counters {
  std::atomic<int64_t> dispatches{0}, all_to_alls{0}, rows_sent{0}, bytes_sent{0}, dropped{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

// What one mesh dim is to the experts (the header's four kinds).
enum class Kind { Data, Expert, Hidden, Same };

// Rows in_splits[r] of `x` to rank r of `group`, rows out_splits[r] back from it; backward sends
// the gradient the reverse way.
struct AllToAll : torch::autograd::Function<AllToAll> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            dist::ProcessGroup* group, const std::vector<int64_t>& out_splits,
                            const std::vector<int64_t>& in_splits) {
    ctx->saved_data["out"] = c10::IValue(out_splits);
    ctx->saved_data["in"] = c10::IValue(in_splits);
    ctx->saved_data["group"] = c10::IValue(reinterpret_cast<int64_t>(group));
    return exchange(x, *group, out_splits, in_splits);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group = reinterpret_cast<dist::ProcessGroup*>(ctx->saved_data["group"].toInt());
    return {exchange(grads[0].contiguous(), *group, ctx->saved_data["in"].toIntVector(),
                     ctx->saved_data["out"].toIntVector()),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
  static at::Tensor exchange(const at::Tensor& x, dist::ProcessGroup& group,
                             const std::vector<int64_t>& out_splits,
                             const std::vector<int64_t>& in_splits) {
    const int64_t rows = std::accumulate(out_splits.begin(), out_splits.end(), int64_t{0});
    auto out = at::empty({rows, x.size(1)}, x.options());
    auto& c = counters();
    c.all_to_alls++;
    const int64_t sent = std::accumulate(in_splits.begin(), in_splits.end(), int64_t{0}) -
                         in_splits[static_cast<size_t>(group.rank())];
    c.rows_sent += sent;
    c.bytes_sent += sent * x.size(1) * static_cast<int64_t>(x.element_size());
    static const uint32_t kContext = timeline::intern("expert all-to-all");
    timeline::CommContext context(kContext);
    group.all_to_all(out, x.contiguous(), out_splits, in_splits).wait();
    return out;
  }
};

struct Boundary {
  std::string name;  // the module's FQN, for errors
  mesh::DeviceMesh mesh;
  std::string ep;  // empty: no expert dim
  const nn::RoutedExperts* experts = nullptr;
};

std::string placements_of(const at::Tensor& t) {
  return dtensor::to_string(dtensor::spec_of(t).placements);
}

// The kind of each mesh dim for this call's placements; throws naming the fix.
std::vector<Kind> classify(const Boundary& b, const Placements& xp,
                           const std::vector<at::Tensor>& weights) {
  const auto hidden = b.experts->hidden_dims();
  const auto& names = b.mesh.dim_names();
  std::vector<Kind> kinds;
  for (size_t d = 0; d < names.size(); ++d) {
    const bool tokens_sharded = xp[d].is_shard(0);
    bool all_replicate = true, all_expert = true, all_hidden = true;
    for (size_t i = 0; i < weights.size(); ++i) {
      const auto& p = dtensor::spec_of(weights[i]).placements[d];
      all_replicate &= p.is_replicate();
      all_expert &= p.is_shard(0);
      all_hidden &= p.is_shard(hidden.at(i));
    }
    if (names[d] == b.ep) {
      VESCALE_CHECK(tokens_sharded, "moe boundary ", b.name, ": the tokens are ",
                    dtensor::to_string(xp), ", Replicate on the ep dim '", b.ep,
                    "'; expert parallelism needs each ep rank to hold other tokens: shard the batch "
                    "over '", b.ep, "' (it is a data dim: list it in grad_reduce.dims)");
      VESCALE_CHECK(all_expert, "moe boundary ", b.name, ": the expert weights must be Shard(0) on '",
                    b.ep, "' (the expert index), e.g. \"", b.name, ".*\": [\"Shard(0)\"]");
      kinds.push_back(Kind::Expert);
    } else if (all_replicate) {
      kinds.push_back(tokens_sharded ? Kind::Data : Kind::Same);
    } else if (all_hidden && !tokens_sharded) {
      kinds.push_back(Kind::Hidden);
    } else {
      VESCALE_FAIL("moe boundary ", b.name, ": on mesh dim '", names[d],
                   "' the expert weights must all be Replicate",
                   (b.ep.empty() ? " (or Shard(0) with a \"moe\" plan entry naming it as ep)" : ""),
                   ", or all sharded along their hidden dim with the tokens Replicate there "
                   "(expert tensor parallelism); got ",
                   placements_of(weights[0]), " for the first weight and tokens ",
                   dtensor::to_string(xp));
    }
  }
  return kinds;
}

// Rows before this rank in the global batch, of each expert, over the dims that shard tokens:
// the capacity rule's queue.
std::vector<int64_t> assignments_before(const Boundary& b, const std::vector<Kind>& kinds,
                                        const at::Tensor& x, const std::vector<int64_t>& counts,
                                        at::Device device) {
  std::vector<std::string> dims;
  for (size_t d = 0; d < kinds.size(); ++d)
    if (kinds[d] == Kind::Data || kinds[d] == Kind::Expert) dims.push_back(b.mesh.dim_names()[d]);
  const int64_t E = static_cast<int64_t>(counts.size());
  std::vector<int64_t> before(counts.size(), 0);
  if (dims.empty()) return before;
  auto& group = b.mesh.group_over(dims);
  std::vector<int64_t> mine{dtensor::spec_of(x).local_offset()[0]};
  mine.insert(mine.end(), counts.begin(), counts.end());
  auto in = at::tensor(mine, at::kLong).to(device);
  auto all = at::empty({group.size() * (E + 1)}, in.options());
  group.all_gather(all, in).wait();
  all = all.cpu();
  const int64_t* a = all.data_ptr<int64_t>();
  for (int64_t r = 0; r < group.size(); ++r) {
    if (a[r * (E + 1)] >= mine[0]) continue;  // a rank at or after this one in the batch
    for (int64_t e = 0; e < E; ++e) before[e] += a[r * (E + 1) + 1 + e];
  }
  return before;
}

// Tokens grouped by global expert (xs, counts per expert) -> the experts' outputs in the same
// order, the experts living on the ep ranks.
at::Tensor run_over_ep(const Boundary& b, const at::Tensor& xs, const std::vector<int64_t>& counts,
                       const std::vector<at::Tensor>& local_weights) {
  auto& group = b.mesh.group(b.ep);
  const int64_t P = group.size(), E = static_cast<int64_t>(counts.size()), El = E / P;
  // 1. Counts: rank r gets, from every source, how many rows it sends to each of r's experts.
  // (On the tokens' device, as NCCL needs; the host then reads them: the split sizes.)
  auto send_counts = at::tensor(counts, at::kLong).to(xs.device());
  auto recv_counts = at::empty({E}, send_counts.options());
  group.all_to_all(recv_counts, send_counts).wait();
  recv_counts = recv_counts.cpu();
  const int64_t* rc = recv_counts.data_ptr<int64_t>();  // [source, local expert]
  std::vector<int64_t> in_splits(P), out_splits(P), local_counts(El, 0);
  std::vector<std::vector<int64_t>> block(P, std::vector<int64_t>(El));
  for (int64_t r = 0; r < P; ++r) {
    in_splits[r] = std::accumulate(counts.begin() + r * El, counts.begin() + (r + 1) * El, int64_t{0});
    for (int64_t e = 0; e < El; ++e) {
      block[r][e] = rc[r * El + e];
      out_splits[r] += block[r][e];
      local_counts[e] += block[r][e];
    }
  }
  // 2. Tokens over, source-major; then expert-major (inside an expert: source rank order).
  auto received = AllToAll::apply(xs, &group, out_splits, in_splits);
  std::vector<int64_t> start(P * El), perm;
  int64_t at_row = 0;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t e = 0; e < El; ++e) start[r * El + e] = at_row, at_row += block[r][e];
  for (int64_t e = 0; e < El; ++e)
    for (int64_t r = 0; r < P; ++r)
      for (int64_t i = 0; i < block[r][e]; ++i) perm.push_back(start[r * El + e] + i);
  auto perm_t = at::tensor(perm, at::TensorOptions().dtype(at::kLong)).to(xs.device());
  // 3. All local experts at once.
  auto y = b.experts->run_experts(received.index_select(0, perm_t), local_counts, local_weights);
  // 4. Back to source-major order (the inverse permutation: unique targets) and home.
  auto back = y.new_zeros({y.size(0), y.size(1)}).index_copy(0, perm_t, y);
  return AllToAll::apply(back, &group, in_splits, out_splits);
}

at::Tensor boundary_forward(const Boundary& b, const std::vector<at::Tensor>& in,
                            const nn::ForwardHooks::Forward& forward) {
  VESCALE_CHECK(in.size() == 3, "moe boundary ", b.name,
                ": the experts module must be called with (tokens, expert ids, gates)");
  at::Tensor x = in[0], ids = in[1], gates = in[2];
  if (!dtensor::is_dtensor(x)) return forward(in);  // plain tensors: the module's own forward
  counters().dispatches++;
  // Row-aligned inputs: the tokens' placements, with anything but Shard(0) made Replicate.
  Placements xp = dtensor::spec_of(x).placements;
  for (auto& p : xp)
    if (!p.is_shard(0)) p = Placement::replicate();
  auto align = [&](const at::Tensor& t) {
    if (!dtensor::is_dtensor(t)) return dtensor::from_local(t, b.mesh, xp, t.sizes().vec());
    return dtensor::spec_of(t).placements == xp ? t : dtensor::redistribute(t, xp);
  };
  x = align(x), ids = align(ids), gates = align(gates);
  const auto weights = b.experts->expert_weights();
  for (const auto& w : weights)
    VESCALE_CHECK(dtensor::is_dtensor(w), "moe boundary ", b.name,
                  ": the expert weights are plain tensors while the tokens are DTensors; "
                  "parallelize the whole model");
  const auto kinds = classify(b, xp, weights);

  // Local views, each with the placements its gradient has (see the header's kinds).
  Placements token_grad = xp, out_place = xp;
  for (size_t d = 0; d < kinds.size(); ++d)
    if (kinds[d] == Kind::Hidden) token_grad[d] = out_place[d] = Placement::partial();
  auto xl = dtensor::to_local(x, token_grad);
  auto gl = dtensor::to_local(gates, token_grad);
  auto il = dtensor::to_local(ids);
  std::vector<at::Tensor> wl;
  for (const auto& w : weights) {
    Placements g = dtensor::spec_of(w).placements;
    for (size_t d = 0; d < kinds.size(); ++d)
      if (kinds[d] == Kind::Data) g[d] = Placement::partial();
    wl.push_back(dtensor::to_local(w, g));
  }

  const int64_t E = b.experts->num_experts(), k = il.size(1);
  auto groups = kernels::group_by_expert(il, E);
  if (b.experts->capacity_factor() > 0) {
    const int64_t cap = kernels::expert_capacity(b.experts->capacity_factor(), x.size(0), k, E);
    const int64_t before_drop = il.numel();
    groups = kernels::within_capacity(groups, cap, assignments_before(b, kinds, x, groups.counts, xl.device()));
    counters().dropped += before_drop - groups.order.numel();
  }
  auto xs = xl.index_select(0, groups.order.div(k, "floor"));
  at::Tensor y;
  if (b.ep.empty()) {
    y = b.experts->run_experts(xs, groups.counts, wl);
  } else {
    VESCALE_CHECK(E % b.mesh.size(b.ep) == 0, "moe boundary ", b.name, ": ", E,
                  " experts do not split evenly over ep=", b.mesh.size(b.ep),
                  "; pick an ep size that divides the number of experts");
    y = run_over_ep(b, xs, groups.counts, wl);
  }
  auto out = kernels::combine_by_token(y, groups.order, gl);
  return dtensor::from_local(out, b.mesh, out_place, x.sizes().vec());
}

}  // namespace

int install_moe_boundaries(torch::nn::Module& model, const plan::Plan& plan,
                           const mesh::DeviceMesh& mesh) {
  int installed = 0;
  for (const auto& m : model.named_modules("", /*include_self=*/true)) {
    const auto* experts = dynamic_cast<const nn::RoutedExperts*>(m.value().get());
    const plan::MoESpec* spec = plan.moe_for(m.key());
    VESCALE_CHECK(spec == nullptr || experts != nullptr, "plan '", plan.source(), "': moe entry for '",
                  m.key(), "' names a module that is not a mixture-of-experts experts module ",
                  "(nn::RoutedExperts); point it at the experts (e.g. layers.*.feed_forward.experts)");
    if (experts == nullptr) continue;
    Boundary b{m.key(), mesh, spec ? spec->ep : "", experts};
    nn::ForwardHooks hooks;
    hooks.around = [b](const std::vector<at::Tensor>& in, const nn::ForwardHooks::Forward& f) {
      return boundary_forward(b, in, f);
    };
    // The module's for its life, as the plan's links: plan::remove_forward_hooks removes it.
    nn::add_forward_hook(*m.value(), nn::HookSlot::Experts, std::move(hooks)).detach();
    ++installed;
  }
  return installed;
}

DispatchStats dispatch_stats() {
  auto& c = counters();
  return {c.dispatches.load(), c.all_to_alls.load(), c.rows_sent.load(), c.bytes_sent.load(),
          c.dropped.load()};
}

void reset_dispatch_stats() {
  auto& c = counters();
  c.dispatches = 0, c.all_to_alls = 0, c.rows_sent = 0, c.bytes_sent = 0, c.dropped = 0;
}

}  // namespace vescale::parallel::expert
