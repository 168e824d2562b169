#include "vescale/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "vescale/common/check.h"
#include "vescale/models/model.h"
#include "vescale/models/shared/meta_device.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/parallel/pipeline/stages.h"
#include "vescale/plan/plan.h"
#include "vescale/train/dry_run.h"
#include "vescale/train/model_factory.h"

namespace vescale::planner {
namespace {

namespace pp = parallel::pipeline;

// Elementwise traffic of a block beyond the stack's passes (training_stack.h): per attention
// probability kept (heads x s/2 per token, causal) 4 passes (scores, softmax, kept for
// backward), where the device's attention keeps them. Backward moves twice as much.
constexpr double kPassesPerProbability = 4;
// AdamW on fp32 master weights reads and writes the weight, both moments and reads the
// gradient: 4 x (2 + 2 + 2 + 1) bytes per parameter.
constexpr double kOptimizerBytesPerParam = 28;
// The reducer's bucket (plan grad_reduce.bucket_mb default): the last one cannot overlap.
constexpr double kBucketBytes = 25.0 * 1024 * 1024;
// Framework operations per block forward (two norms, seven projections, RoPE, attention, the
// activation, two residual adds and the reshapes between: counted in our LLaMA block), per
// MoE layer's routing beyond that (router, softmax, top-k and its normalisation, the sort by
// expert and its counts, the gather, the combine's zeros, copy, gate multiply and sum: about
// 20) and per expert a rank holds (three GEMM calls), and per embedding or head. Backward runs
// about twice as many.
constexpr double kOpsPerBlock = 40, kOpsPerMoE = 20, kOpsPerExpert = 3, kOpsPerEnd = 5;
// The coefficient of variation of one expert's share of the routed tokens in a micro-batch:
// our tiny Mixtral's logged loads (metrics "experts", steps 1-6) put the busiest expert at
// 1.1-2.0x the mean, a spread of about 0.3; a router trained with its balancing loss is more
// even, so this prices early training.
constexpr double kExpertLoadCv = 0.3;

// The ranks a dim's group spans, strides included: the product of its size and the dims inside
// it (pp, dp, ep, tp outermost first).
int64_t span(const Layout& l, MeshDim dim) {
  switch (dim) {
    case MeshDim::TP:
      return l.tp;
    case MeshDim::EP:
      return l.ep * l.tp;
    case MeshDim::DP:
      return l.dp * l.ep * l.tp;
    case MeshDim::PP:
      return l.ranks();
  }
  return l.ranks();
}

}  // namespace

std::string Layout::describe() const {
  std::string s = "pp=" + std::to_string(pp) + " dp=" + std::to_string(dp);
  if (ep > 1) s += " ep=" + std::to_string(ep);
  s += " tp=" + std::to_string(tp);
  if (sequence_parallel) s += " sp";
  s += " zero" + std::to_string(zero);
  if (bf16_reduce) s += " bf16grad";
  if (checkpointing) s += " ckpt";
  s += " mb" + std::to_string(micro_batch);
  if (pp > 1) {
    s += std::string(" ") + plan::to_string(schedule);
    if (chunks > 1) s += "x" + std::to_string(chunks);
  }
  return s;
}

Layout parse_layout(const std::string& text) {
  Layout l;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    auto number = [&](size_t from) {
      size_t used = 0;
      int64_t v = -1;
      try {
        v = std::stoll(w.substr(from), &used);
      } catch (const std::exception&) {
      }
      VESCALE_CHECK(v >= 1 && used == w.size() - from, "layout '", text, "': '", w,
                    "' needs a positive number");
      return v;
    };
    const auto x = w.rfind('x');
    if (w.rfind("pp=", 0) == 0) l.pp = number(3);
    else if (w.rfind("dp=", 0) == 0) l.dp = number(3);
    else if (w.rfind("ep=", 0) == 0) l.ep = number(3);
    else if (w.rfind("tp=", 0) == 0) l.tp = number(3);
    else if (w == "sp") l.sequence_parallel = true;
    else if (w == "ckpt") l.checkpointing = true;
    else if (w == "bf16grad") l.bf16_reduce = true;
    else if (w == "zero0") l.zero = 0;
    else if (w.rfind("zero", 0) == 0) l.zero = number(4);
    else if (w.rfind("mb", 0) == 0) l.micro_batch = number(2);
    else if (auto kind = plan::schedule_kind_named(w.substr(0, x == std::string::npos ? w.size() : x))) {
      l.schedule = *kind;
      if (x != std::string::npos) l.chunks = number(x + 1);
    } else {
      VESCALE_FAIL("layout '", text, "': '", w, "' is none of pp=N dp=N ep=N tp=N sp zeroN ckpt "
                   "mbN <schedule>[xCHUNKS]");
    }
  }
  return l;
}

bool ModelShape::moe() const { return n_experts > 0; }

ModelShape model_shape(const train::Config& config) {
  ModelShape m;
  m.type = config.model.type;
  m.n_layers = config.model.options->n_layers();
  m.dim = config.model.options->dim();
  m.n_heads = config.model.options->n_heads();
  m.vocab = config.model.vocab_size();
  m.seq_len = config.train.seq_len;
  m.flops_per_token = train::flops_per_token(config.model, config.train.seq_len);
  m.block = train::block_activations(config.model);
  train::Model model;
  {
    models::MetaDeviceScope meta;
    model = train::build_model(config.model);
  }
  VESCALE_CHECK(!model.layers.empty(), "vescale-plan: model.type '", m.type,
                "' lists no layers (Model::layers), so it cannot be planned");
  const auto shapes = train::parameter_shapes(*model.module);
  const auto& spec = models::spec(m.type);
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const auto& layer = model.layers[i];
    LayerShape ls;
    ls.name = layer.name;
    ls.block = i > 0 && i + 1 < model.layers.size();
    for (const auto& [name, shape] : shapes) {
      bool mine = false;
      for (const auto& mod : layer.modules) mine = mine || name.rfind(mod + ".", 0) == 0;
      if (!mine) continue;
      double n = 1;
      for (int64_t d : shape) n *= static_cast<double>(d);
      ls.params += n;
      if (shape.size() < 2) continue;
      const double fraction = spec.matmul_fraction(*config.model.options, name, shape);
      ls.active_matmul += n * fraction;
      if (fraction > 0 && fraction < 1 && shape.size() == 3) {  // stacked experts [E, ...]
        ls.expert_params += n;
        ls.expert_matmul += n * fraction;
        m.n_experts = shape[0];
        ls.moe_top_k = std::round(fraction * static_cast<double>(shape[0]));
      }
    }
    m.layers.push_back(ls);
  }
  return m;
}

double expert_imbalance(int64_t ep, double experts_per_rank) {
  if (ep <= 1) return 1;
  // The expected largest of n standard normals, the integral of x n phi(x) Phi(x)^(n-1).
  const double n = static_cast<double>(ep), dx = 1e-2;
  double largest = 0;
  for (double x = -8; x < 8; x += dx) {
    const double phi = std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
    largest += x * n * phi * std::pow(0.5 * std::erfc(-x / std::sqrt(2.0)), n - 1) * dx;
  }
  return 1 + kExpertLoadCv / std::sqrt(std::max(experts_per_rank, 1.0)) * largest;
}

double ring_passes(Collective c) { return c == Collective::AllReduce ? 2 : 1; }

double collective_s(Collective c, double bytes, int64_t n, const Link& link) {
  if (n <= 1) return 0;
  const double k = static_cast<double>(n);
  const LinkFigures f = link.of(c);
  return ring_passes(c) * ((k - 1) / k * bytes / f.bandwidth + (k - 1) * f.latency);
}
double all_reduce_s(double bytes, int64_t n, const Link& link) {
  return collective_s(Collective::AllReduce, bytes, n, link);
}
double reduce_scatter_s(double bytes, int64_t n, const Link& link) {
  return collective_s(Collective::ReduceScatter, bytes, n, link);
}
double all_gather_s(double bytes, int64_t n, const Link& link) {
  return collective_s(Collective::AllGather, bytes, n, link);
}
double all_to_all_s(double bytes, int64_t n, const Link& link) {
  return collective_s(Collective::AllToAll, bytes, n, link);
}
double p2p_s(double bytes, const Link& link) { return bytes / link.bandwidth + link.latency; }

const Link& link_of(const Layout& l, MeshDim dim, const DeviceProfile& device,
                    int64_t gpus_per_node) {
  return span(l, dim) <= gpus_per_node ? device.intra_node : device.inter_node;
}

StepPrediction predict(const ModelShape& model, const train::Config& config, const Layout& l,
                       int64_t global_batch, const DeviceProfile& device, int64_t gpus_per_node,
                       SimulationCache* cache, const TrainingStack& stack) {
  StepPrediction out;
  const int64_t per_microbatch = l.micro_batch * l.data_ranks();
  VESCALE_CHECK(global_batch % per_microbatch == 0, "global batch ", global_batch,
                " is not a multiple of micro batch ", l.micro_batch, " x ", l.data_ranks(),
                " data ranks");
  const int64_t M = global_batch / per_microbatch;
  out.microbatches = M;
  const bool fp32 = config.train.dtype == train::DType::Fp32;
  const double act_bytes = fp32 ? 4 : 2;
  const double tp = static_cast<double>(l.tp), ep = static_cast<double>(l.ep);
  const double tokens = static_cast<double>(l.micro_batch * model.seq_len);
  const double dim = static_cast<double>(model.dim);
  const double seq = static_cast<double>(model.seq_len);
  const bool sp = l.sequence_parallel && l.tp > 1;
  const Link& tp_link = link_of(l, MeshDim::TP, device, gpus_per_node);
  const Link& ep_link = link_of(l, MeshDim::EP, device, gpus_per_node);
  const Link& pp_link = link_of(l, MeshDim::PP, device, gpus_per_node);
  const Link& dp_link = link_of(l, MeshDim::DP, device, gpus_per_node);
  // The achieved rate of the block's typical GEMM: tokens x dim x dim / tp multiply-adds.
  const double rate = device.gemm_flops(tokens * dim * dim / tp, fp32);

  // Per chain layer, one micro-batch's forward on one rank: compute, and the exposed tp/ep
  // communication (forward; backward moves the same again).
  struct Cost {
    double compute = 0, tp_comm = 0, ep_comm = 0, loss_comm = 0;
  };
  std::vector<Cost> layer_cost;
  const double act = tokens * dim * act_bytes;  // one [b, s, h] activation
  // Under expert parallelism every MoE layer waits for the busiest rank's experts.
  const double imbalance =
      expert_imbalance(l.ep, static_cast<double>(model.n_experts) / static_cast<double>(l.ep));
  for (const auto& ls : model.layers) {
    Cost c;
    const double gemm_flops =
                     2 * tokens * (ls.active_matmul + (imbalance - 1) * ls.expert_matmul) / tp,
                 gemm_s = gemm_flops / rate;
    // QK^T and AV, causal: half of them.
    c.compute = (gemm_flops + (ls.block ? 2 * tokens * seq * dim / tp : 0)) / rate;
    const double routing_ops =
        ls.moe_top_k > 0 ? kOpsPerMoE + kOpsPerExpert * static_cast<double>(model.n_experts) / ep
                         : 0;
    c.compute += device.op_overhead * (ls.block ? kOpsPerBlock + routing_ops : kOpsPerEnd);
    if (ls.block) {
      const double probabilities =
          device.attention_keeps_probabilities
              ? kPassesPerProbability * static_cast<double>(model.n_heads) * seq / 2 / tp
              : 0;
      // A routed layer moves each token's row once per expert choice (gather, combine).
      const double routing = stack.passes_per_assignment * ls.moe_top_k * dim / (sp ? tp : 1.0);
      const double elements = stack.passes_per_residual * dim / (sp ? tp : 1.0) +
                              stack.passes_per_width * ls.active_matmul / dim / tp + probabilities +
                              routing;
      c.compute += elements * tokens * act_bytes / device.memory_bandwidth;
      // Two boundaries per block (attention, feed-forward): an all-reduce each, or with
      // sequence parallelism an all-gather before and a reduce-scatter after.
      // Each blocking collective also waits DeviceProfile::collective_wait.
      const double wait = device.collective_wait;
      if (l.tp > 1)
        c.tp_comm = sp ? 2 * (all_gather_s(act, l.tp, tp_link) +
                              reduce_scatter_s(act, l.tp, tp_link) + 2 * wait)
                       : 2 * (all_reduce_s(act, l.tp, tp_link) + wait);
      // Pipelined with the GEMMs in tp chunks: the first chunk waits, the rest hide behind them.
      if (stack.overlaps_tp && l.tp > 1)
        c.tp_comm = c.tp_comm / tp + std::max(0.0, c.tp_comm * (tp - 1) / tp - gemm_s);
      // The count exchange (how many rows each rank sends each expert: a latency), then
      // dispatch and combine: each token's top_k copies of its row, the busiest rank's share.
      if (ls.moe_top_k > 0 && l.ep > 1)
        c.ep_comm =
            all_to_all_s(4 * static_cast<double>(model.n_experts), l.ep, ep_link) +
            2 * all_to_all_s(imbalance * act * ls.moe_top_k / (sp ? tp : 1.0), l.ep, ep_link) +
            3 * wait;
    }
    // The loss's mean counts the valid targets of the whole batch: an all-reduce of one number
    // over the data ranks, per micro-batch, in the forward of the last layer.
    if (&ls == &model.layers.back() && l.data_ranks() > 1)
      c.loss_comm = all_reduce_s(4, l.data_ranks(), dp_link) + device.collective_wait;
    layer_cost.push_back(c);
  }

  // Stages: the plan's even split over pp x chunks stages.
  const int64_t stages = l.pp * l.chunks;
  std::vector<std::string> names;
  for (const auto& ls : model.layers) names.push_back(ls.name);
  plan::PipelineSpec spec;
  spec.split = "even";
  std::vector<int64_t> starts =
      stages > 1 ? pp::stage_starts(names, spec, stages) : std::vector<int64_t>{0};
  starts.push_back(static_cast<int64_t>(names.size()));
  std::vector<double> f(stages, 0), tp_s(stages, 0), ep_s(stages, 0), loss_s(stages, 0),
      params(stages, 0), expert(stages, 0), blocks(stages, 0);
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t i = starts[s]; i < starts[s + 1]; ++i) {
      f[s] += layer_cost[i].compute;
      tp_s[s] += layer_cost[i].tp_comm;
      ep_s[s] += layer_cost[i].ep_comm;
      loss_s[s] += layer_cost[i].loss_comm;
      params[s] += model.layers[i].params - model.layers[i].expert_params;
      expert[s] += model.layers[i].expert_params;
      blocks[s] += model.layers[i].block ? 1 : 0;
    }
  // The simulator's costs: forward F (+ its communication), input gradient I (= F, plus a
  // recomputed forward under checkpointing), weight gradient W (= the GEMM part of F).
  double unit = 0;
  std::vector<double> fwd(stages), inp(stages), wgt(stages);
  for (int64_t s = 0; s < stages; ++s) {
    const double comm = tp_s[s] + ep_s[s];
    fwd[s] = f[s] + comm + loss_s[s];
    inp[s] = f[s] + comm + (l.checkpointing ? f[s] + comm : 0);
    // Each micro-batch moves the stage's weights and gradients (TrainingStack::weight_passes).
    wgt[s] = f[s] + stack.weight_passes * 4 * (params[s] / tp + expert[s] / (tp * ep)) /
                        device.memory_bandwidth;
    unit = std::max(unit, fwd[s]);
  }
  pp::ActionCosts costs;
  // One weight per stage scales all three: F, I and W keep the busiest stage's ratios.
  const int64_t busiest = std::max_element(fwd.begin(), fwd.end()) - fwd.begin();
  costs.forward = fwd[busiest] / unit;
  costs.backward_input = inp[busiest] / unit;
  costs.backward_weight = wgt[busiest] / unit;
  for (int64_t s = 0; s < stages; ++s) costs.stage_weight.push_back(fwd[s] / unit);
  const double boundary = act / (sp ? tp : 1.0);
  costs.p2p = l.pp > 1 ? p2p_s(boundary, pp_link) / unit : 0;
  const auto schedule = pp::make_schedule(l.pp > 1 ? l.schedule : plan::ScheduleKind::OneFOneB,
                                          static_cast<int>(l.pp), static_cast<int>(M),
                                          static_cast<int>(l.chunks));
  std::vector<double> key = {static_cast<double>(schedule.kind), static_cast<double>(l.pp),
                             static_cast<double>(M), static_cast<double>(l.chunks), costs.forward,
                             costs.backward_input, costs.backward_weight, costs.p2p};
  key.insert(key.end(), costs.stage_weight.begin(), costs.stage_weight.end());
  pp::Simulation computed;
  const pp::Simulation* found = nullptr;
  if (cache) {
    auto it = cache->runs.find(key);
    if (it == cache->runs.end()) it = cache->runs.emplace(key, pp::simulate(schedule, costs)).first;
    found = &it->second;
  } else {
    computed = pp::simulate(schedule, costs);
    found = &computed;
  }
  const pp::Simulation& sim = *found;
  double makespan = sim.makespan * unit;
  // Ranks sharing cores (DeviceProfile::ranks_per_core): the costs are each rank's share with
  // every rank running; a rank waiting in the bubble lends its share, so the pipeline takes the
  // larger of its critical path on whole cores and its work spread over all of them (the
  // average busy time per pipeline rank: every pipeline of the world is the same).
  if (device.ranks_per_core > 1 && l.pp > 1) {
    double busy = 0;
    for (double b : sim.busy) busy += b;
    makespan = std::max(makespan / device.ranks_per_core, busy * unit / static_cast<double>(l.pp));
  }
  const int64_t busiest_rank =
      std::max_element(sim.busy.begin(), sim.busy.end()) - sim.busy.begin();
  double compute = 0, tp_total = 0, ep_total = 0, loss_total = 0;
  // Per micro-batch: the forward, then I + W (and the recomputed forward); the communication
  // runs in the forward, in I, and in the recomputed forward.
  const double back = l.checkpointing ? 3 : 2, comm_passes = l.checkpointing ? 3 : 2;
  for (int s : schedule.stages_of(static_cast<int>(busiest_rank))) {
    compute += static_cast<double>(M) * (f[s] * back + wgt[s]);
    tp_total += static_cast<double>(M) * tp_s[s] * comm_passes;
    ep_total += static_cast<double>(M) * ep_s[s] * comm_passes;
    loss_total += static_cast<double>(M) * loss_s[s];
  }
  out.compute_s = compute;
  out.exposed_s["tp"] = tp_total;
  out.exposed_s["ep"] = ep_total;
  out.bubble_s = std::max(0.0, makespan - sim.busy[busiest_rank] * unit);
  out.exposed_s["pp"] = 0;  // inside the bubble: the simulator's receives wait for it

  // Gradients after backward, on every rank the same: the stage's replicated weights over the
  // data ranks (dp x ep), the experts over dp, fp32. The overlapped reducer hides all but the
  // last bucket behind the last micro-batch's backward.
  double dp_comm = 0, opt = 0, peak = 0, largest_block = 0;
  for (const auto& ls : model.layers)
    if (ls.block)
      largest_block = std::max(largest_block,
                               (ls.params - ls.expert_params) / tp + ls.expert_params / (tp * ep));
  const int64_t z = l.zero;
  double top_k = 0;  // a MoE layer's assignments per token
  for (const auto& ls : model.layers) top_k = std::max(top_k, ls.moe_top_k);
  for (int r = 0; r < l.pp; ++r) {
    double dense = 0, experts = 0, in_flight = static_cast<double>(sim.peak_in_flight[r]),
           awaiting_weight = static_cast<double>(sim.peak_awaiting_weight[r]), nblocks = 0,
           back_last = 0, fwd_rank = 0;
    bool last = false;
    for (int s : schedule.stages_of(r)) {
      dense += params[s] / tp;
      experts += expert[s] / (tp * ep);
      nblocks += blocks[s];
      back_last += inp[s] + wgt[s];  // seconds, one micro-batch
      fwd_rank += fwd[s];
      last = last || s == stages - 1;
    }
    // The gradients on the wire (fp32, or bf16 with parallel.reduce_dtype=bf16 or a stack that
    // reduces in bf16); the weights ZeRO gathers at the stack's width (fp32 masters here).
    const double wire = l.bf16_reduce || stack.reduces_in_bf16 ? 2 : 4;
    const double grad_bytes = wire * dense, expert_grad = wire * experts;
    const double weight_bytes = stack.gathered_weight_bytes * dense,
                 expert_weights = stack.gathered_weight_bytes * experts;
    const int64_t D = l.data_ranks();
    // Overlappable: the gradients' reduction (all-reduce, or reduce-scatter under ZeRO) behind
    // the last micro-batch's backward; ZeRO-3's gathers of each block's weights, per
    // micro-batch forward and backward, prefetched behind all of the step's compute. After the
    // optimizer: ZeRO-1/2's all-gather of the updated weights.
    double hideable = z >= 1 ? reduce_scatter_s(grad_bytes, D, dp_link) +
                                   reduce_scatter_s(expert_grad, l.dp, dp_link)
                             : all_reduce_s(grad_bytes, D, dp_link) +
                                   all_reduce_s(expert_grad, l.dp, dp_link);
    double hidden = back_last, after = 0, gather_hidden = 0;
    if (z == 1 || z == 2)
      after = all_gather_s(weight_bytes, D, dp_link) + all_gather_s(expert_weights, l.dp, dp_link);
    // Gathered bucket by bucket as the next step's first forward reaches them.
    if (stack.overlaps_param_gather) {
      gather_hidden = std::min(after, fwd_rank);
      after -= gather_hidden;
    }
    if (z == 3) {
      hideable += 2 * static_cast<double>(M) * all_gather_s(weight_bytes, D, dp_link);
      hidden = static_cast<double>(M) * (fwd_rank + back_last);
    }
    const double last_bucket = all_reduce_s(std::min(kBucketBytes, grad_bytes + expert_grad),
                                            D, dp_link);
    // What is hidden still costs the compute beside it DeviceProfile::overlap_cost of its time.
    const double overlapped = std::min(hideable, hidden) + gather_hidden;
    dp_comm = std::max(dp_comm, std::max(0.0, hideable - hidden) + last_bucket + after +
                                    device.overlap_cost * overlapped);
    const double d = static_cast<double>(l.data_ranks()), dpd = static_cast<double>(l.dp);
    // The elements this rank holds whole, and its ZeRO slice of them (experts sliced over dp).
    const double w = dense + experts, slice = dense / d + experts / dpd;
    opt = std::max(opt, kOptimizerBytesPerParam * (z >= 1 ? slice : w) / device.memory_bandwidth);
    // Memory (docs/planner.md): what stays through the step (fp32 weights, AdamW's two moments
    // and under ZeRO an fp32 slice of the weights; under ZeRO-3 the gathered weights of the
    // block running and the one prefetched), then the largest of the moments. At the turn from a
    // forward to its backward: the activations in flight and, when earlier micro-batches'
    // backwards have run, the gradients accumulated so far (full size: only the last
    // micro-batch's backward reduces). At the reduction: every gradient and the bucket that
    // takes their place; under ZeRO 2-3 with one micro-batch, the slices kept and the two
    // buckets in flight instead (the gradients go as they come). Under ZeRO-1/2, the optimizer
    // step is a third moment (below).
    const double w_bytes = 4 * (z >= 3 ? slice : w);
    // Experts without a dp dim have no gradient to reduce: they sit in no bucket, and plain
    // AdamW steps them whole (ShardedAdamW's `rest`).
    const double unbucketed = l.dp > 1 ? 0 : experts, bucketed_slice = slice - unbucketed;
    const double o_bytes = z >= 1 ? train::optimizer_bytes_per_element(z) * bucketed_slice +
                                        train::optimizer_bytes_per_element(0) * unbucketed
                                  : train::optimizer_bytes_per_element(0) * w;
    const double gathered = z >= 3 ? 2 * 4 * largest_block : 0;
    const double full_grads = 4 * w, kept_grads = 4 * (z >= 2 ? slice : w);
    const double per_stage_blocks = nblocks / static_cast<double>(l.chunks);
    // Under expert parallelism each assignment's row also stays as the all-to-all delivered it
    // to its expert, and as the expert's output came back (4 more rows per token at top-2).
    models::BlockActivations kept = model.block;
    if (l.ep > 1) kept.replicated += 2 * top_k * static_cast<double>(model.dim);
    const double block = train::block_activation_bytes(kept, model.seq_len, l.micro_batch, l.tp, sp,
                                                       fp32, device.attention_keeps_probabilities);
    const double block_in =
        train::block_input_bytes(model.seq_len, l.micro_batch, model.dim, l.tp, sp, fp32);
    const double logits = last ? 8.0 * seq * static_cast<double>(l.micro_batch) *
                                     static_cast<double>(model.vocab) / tp
                               : 0;
    // A stage's output is held with its micro-batch until the backward (the next stage's
    // input; the last stage's is the loss).
    const double output = last && l.chunks == 1 ? 0 : block_in;
    // Checkpointed, a micro-batch keeps each block's input; the block being backpropagated is
    // recomputed whole. Under a split schedule, the blocks whose I ran keep each GEMM's
    // recomputed input and output gradient for W until it runs
    // (BlockActivations::split_weight_tensor_parallel); the block an I is recomputing holds its
    // own inside its activations, beside all the others.
    const double for_weight =
        l.checkpointing ? train::block_activation_bytes(
                              models::BlockActivations{
                                  .tensor_parallel = model.block.split_weight_tensor_parallel},
                              model.seq_len, l.micro_batch, l.tp, sp, fp32, false)
                        : 0;
    const double acts =
        l.checkpointing ? in_flight * (per_stage_blocks * block_in + output) +
                              std::max(0.0, awaiting_weight * per_stage_blocks - 1) * for_weight +
                              (nblocks > 0 ? block : 0) + logits
                        : in_flight * (per_stage_blocks * block + output) + logits;
    // The block being backpropagated holds its first gradients beside its saved tensors
    // (BlockActivations::backward_*). The accumulated gradients are there if a micro-batch's
    // backward has finished by then (the peak of micro-batch-stages in flight recurs after a
    // backward only when there are more of them), and with checkpointing in any case: every
    // block recomputes as much, so the peak is the last block's, the others' gradients made
    // (under ZeRO-2/3 with one micro-batch, reduced bucket by bucket as they come).
    const double backward_start =
        nblocks > 0
            ? train::block_backward_bytes(model.block, model.seq_len, l.micro_batch, l.tp, sp, fp32)
            : 0;
    const bool recurs = M * l.chunks > sim.peak_in_flight[r];
    const double bucket_size = std::min(kBucketBytes, 4 * (w - unbucketed));
    const double bucket = d > 1 ? bucket_size : 0;
    // Under ZeRO-2/3 with one micro-batch: the slices kept and two buckets in flight, at most
    // every gradient (a model in one bucket launches it only at the end).
    const double sliced_as_they_come = std::min(full_grads, kept_grads + 2 * bucket);
    const double grads_by_then = recurs             ? full_grads
                                 : !l.checkpointing ? 0
                                 : z >= 2 && M == 1 ? sliced_as_they_come
                                                    : full_grads;
    const double forward = acts + backward_start + grads_by_then;
    const double reduction = z >= 2 && M == 1
                                 ? std::min(full_grads + bucket, kept_grads + 2 * bucket)
                                 : full_grads + bucket;
    // At ZeRO-1/2's optimizer step (ShardedAdamW::step): the gradients still held (whole, but
    // for ZeRO-2 with one micro-batch, whose slices went as they came), the reduced slices it
    // reads, and the bucket of updated weights being gathered (one at a time: the previous one
    // is copied out and freed first). The peak once checkpointing has made the activations
    // small.
    const bool whole_grads = z == 1 || M > 1;
    const double optimizer_step =
        z == 1 || z == 2
            ? (whole_grads ? full_grads + 4 * bucketed_slice : kept_grads) + bucket_size
            : 0;
    const double rank_peak =
        w_bytes + o_bytes + gathered + std::max({forward, reduction, optimizer_step});
    out.peak_memory_by_rank.push_back(rank_peak);
    peak = std::max(peak, rank_peak);
  }
  out.exposed_s["dp"] = dp_comm + loss_total;  // the loss's counts run inside the makespan
  out.optimizer_s = opt;
  out.peak_memory_bytes = peak;
  out.step_s = makespan + dp_comm + opt;
  const double step_tokens = static_cast<double>(global_batch) * seq;
  out.tokens_per_s_per_device = step_tokens / out.step_s / static_cast<double>(l.ranks());
  out.mfu = model.flops_per_token * step_tokens /
            (out.step_s * device.peak(fp32) * static_cast<double>(l.ranks()));
  return out;
}

}  // namespace vescale::planner
