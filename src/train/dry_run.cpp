#include "vescale/train/dry_run.h"

#include <algorithm>
#include <cstdio>
#include <array>
#include <map>
#include <optional>
#include <set>

#include "train/trainer_internal.h"
#include "vescale/models/shared/meta_device.h"
#include "vescale/common/check.h"
#include "vescale/parallel/pipeline/schedule.h"
#include "vescale/parallel/pipeline/stages.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/plan/plan.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/run_plan.h"

namespace vescale::train {

namespace {

// Whether the plan keeps the residual stream sharded along the sequence over tp (a forward
// entry with Shard(1) on the tp dim).
bool sequence_parallel(const plan::Plan& plan) {
  const auto& dims = plan.mesh_dims();
  const auto tp = std::find(dims.begin(), dims.end(), plan::kTensorDim);
  if (tp == dims.end()) return false;
  const size_t i = static_cast<size_t>(tp - dims.begin());
  for (const auto& [pattern, f] : plan.forwards())
    for (const auto* list : {&f.input, &f.output})
      for (const auto& pl : *list)
        if (i < pl.size() && pl[i].is_shard(1)) return true;
  return false;
}

}  // namespace

double block_activation_bytes(const models::BlockActivations& block, int64_t seq_len,
                              int64_t micro_batch, int64_t tp, bool sequence_parallel, bool fp32,
                              bool keeps_probabilities) {
  const double s = static_cast<double>(seq_len), sb = s * static_cast<double>(micro_batch);
  const double t = static_cast<double>(tp);
  const double per_token = block.replicated / (sequence_parallel ? t : 1.0) + block.gathered +
                           block.tensor_parallel / t +
                           (keeps_probabilities ? block.attention_heads / t * s : 0.0);
  return sb * per_token * (fp32 ? 4.0 : 2.0);
}

double block_backward_bytes(const models::BlockActivations& block, int64_t seq_len,
                            int64_t micro_batch, int64_t tp, bool sequence_parallel, bool fp32) {
  return block_activation_bytes(
      models::BlockActivations{.replicated = block.backward_replicated,
                               .tensor_parallel = block.backward_tensor_parallel},
      seq_len, micro_batch, tp, sequence_parallel, fp32, /*keeps_probabilities=*/false);
}

double optimizer_bytes_per_element(int64_t zero) { return zero == 1 || zero == 2 ? 12 : 8; }

models::BlockActivations block_activations(const ModelConfig& config) {
  const auto& spec = models::spec(config.type);
  VESCALE_CHECK(static_cast<bool>(spec.block_activations), "model.type '", config.type,
                "' does not count its block's activations (ModelSpec::block_activations), so "
                "its memory cannot be estimated; add the count to its spec file");
  return spec.block_activations(*config.options);
}

double block_input_bytes(int64_t seq_len, int64_t micro_batch, int64_t dim, int64_t tp,
                         bool sequence_parallel, bool fp32) {
  const double sbh = static_cast<double>(seq_len) * static_cast<double>(micro_batch) *
                     static_cast<double>(dim);
  return 2.0 * sbh * (fp32 ? 2.0 : 1.0) / (sequence_parallel ? static_cast<double>(tp) : 1.0);
}

MemoryEstimate memory_per_rank(const Config& config, const mesh::MeshShape& mesh) {
  // One meta build (shapes, no storage): the parameters' names and shapes, and its layers.
  Model model;
  {
    models::MetaDeviceScope meta;
    model = build_model(config.model);
  }
  const ParamShapes shapes = parameter_shapes(*model.module);
  // With --set parallel.pipeline.* and the micro-batches of train.global_batch_size.
  std::optional<plan::Plan> plan = run_plan(config, mesh).plan;
  const int64_t zero = zero_stage(config.parallel, plan ? &*plan : nullptr);
  const std::optional<plan::PipelineSpec> pipe = plan ? plan->pipeline() : std::nullopt;
  // The dims parameters are placed on: all of them, or a pipeline stage's (the others).
  // Under context parallelism (the context dim joined to dp), each rank holds seq_len / cp
  // tokens of every sequence.
  const plan::ParallelDims all(mesh, plan ? &*plan : nullptr);
  const plan::ParallelDims roles(all.stage_dims(), nullptr);
  const int64_t local_seq = config.train.seq_len / all.cp();
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const auto& [name, size] : roles.dims) names.push_back(name), sizes.push_back(size);
  std::map<std::string, dtensor::Placements> placements;
  if (plan && !plan->mesh_dims().empty()) placements = plan->resolve(names, shapes);
  const double dp = static_cast<double>(roles.dp());
  const double tp = static_cast<double>(roles.tp());
  // One parameter's bytes on a rank: params, grads, optimizer.
  auto param_bytes = [&](const std::string& name, const std::vector<int64_t>& shape) {
    std::vector<int64_t> local = shape;
    bool replicated_on_dp = true;
    auto it = placements.find(name);
    if (it != placements.end()) {
      for (size_t i = 0; i < it->second.size(); ++i) {
        const auto& p = it->second[i];
        if (!p.is_shard()) continue;
        const int64_t k = sizes[i];
        local[p.dim] = (local[p.dim] + k - 1) / k;
        if (names[i] == plan::kDataDim) replicated_on_dp = false;
      }
    }
    double n = 1;
    for (int64_t d : local) n *= static_cast<double>(d);
    const double zdiv = replicated_on_dp ? dp : 1.0;
    return std::array<double, 3>{4 * n / (zero >= 3 ? zdiv : 1.0), 4 * n / (zero >= 2 ? zdiv : 1.0),
                                 optimizer_bytes_per_element(zero) * n / (zero >= 1 ? zdiv : 1.0)};
  };

  MemoryEstimate m;
  m.zero = zero;
  m.parameters = parameter_count(shapes);
  m.sequence_parallel = plan && sequence_parallel(*plan);
  m.experts = !model.moe.expert_params.empty();
  // One block's activations per micro-batch, and with checkpointing its input alone.
  const auto& t = config.train;
  const bool fp32 = t.dtype != DType::Bf16;
  const int64_t dim = config.model.options->dim(), tp_size = roles.tp();
  // For a GPU: flash attention keeps no probabilities.
  const double block = block_activation_bytes(block_activations(config.model), local_seq,
                                              t.batch_size, tp_size, m.sequence_parallel, fp32,
                                              /*keeps_probabilities=*/false);
  const double block_input =
      block_input_bytes(local_seq, t.batch_size, dim, tp_size, m.sequence_parallel, fp32);

  // The model's layers: which parameters each pipeline rank holds.
  const auto& layers = model.layers;
  auto params_of = [&](const std::vector<std::string>& modules) {
    std::set<std::string> out;
    for (const auto& [name, shape] : shapes)
      for (const auto& mod : modules)
        if (name.rfind(mod + ".", 0) == 0) out.insert(name);
    return out;
  };
  // The head's logits (fp32, and their gradient), on the rank that runs the last layer.
  double head_shard = 1;
  std::set<std::string> head =
      layers.empty() ? params_of({"output"}) : params_of(layers.back().modules);
  for (const auto& n : head)
    if (auto it = placements.find(n); it != placements.end())
      for (size_t i = 0; i < it->second.size(); ++i)
        if (it->second[i].is_shard() && names[i] == plan::kTensorDim) head_shard = tp;
  const double logits = 8.0 * static_cast<double>(local_seq) * static_cast<double>(t.batch_size) *
                        static_cast<double>(config.model.options->vocab_size()) / head_shard;

  auto add_params = [&](StageMemory& s, const std::set<std::string>& held) {
    for (const auto& [name, shape] : shapes) {
      if (!held.count(name)) continue;
      const auto b = param_bytes(name, shape);
      s.param_bytes += b[0], s.grad_bytes += b[1], s.optimizer_bytes += b[2];
      if (m.experts && plan::fqn_match(model.moe.expert_params, name))
        s.expert_bytes += b[0] + b[1] + b[2];
    }
  };
  // `flight` micro-batch-stages of `blocks_per_stage` blocks each; one block recomputed at a time.
  auto add_activations = [&](StageMemory& s, double blocks_per_stage, bool last) {
    const double flight = static_cast<double>(s.in_flight), head_part = last ? logits : 0;
    s.activation_bytes = flight * blocks_per_stage * block + head_part;
    s.activation_bytes_checkpointed =
        flight * blocks_per_stage * block_input + (s.blocks > 0 ? block : 0) + head_part;
  };
  if (!pipe) {
    StageMemory s;
    s.blocks = config.model.options->n_layers();
    std::set<std::string> all;
    for (const auto& [name, shape] : shapes) all.insert(name);
    add_params(s, all);
    add_activations(s, static_cast<double>(s.blocks), true);
    m.stages.push_back(s);
  } else {
    VESCALE_CHECK(!layers.empty(), "model.type '", config.model.type,
                  "' cannot be pipelined yet (its builder lists no pipeline layers)");
    const int ranks = static_cast<int>(mesh.size(pipe->dim));
    const auto schedule = parallel::pipeline::make_schedule(pipe->schedule, ranks,
                                                            static_cast<int>(pipe->microbatches),
                                                            static_cast<int>(pipe->chunks));
    std::vector<std::string> layer_names;
    for (const auto& l : layers) layer_names.push_back(l.name);
    auto starts =
        parallel::pipeline::stage_starts(layer_names, *pipe, schedule.stages, plan->source());
    starts.push_back(static_cast<int64_t>(layers.size()));
    const auto sim = parallel::pipeline::simulate(schedule);
    for (int r = 0; r < ranks; ++r) {
      StageMemory s;
      s.pp_rank = r;
      std::vector<std::string> modules;
      const auto mine = schedule.stages_of(r);
      for (int st : mine)
        for (int64_t l = starts[st]; l < starts[st + 1]; ++l) {
          modules.insert(modules.end(), layers[l].modules.begin(), layers[l].modules.end());
          if (l > 0 && l + 1 < static_cast<int64_t>(layers.size()))
            ++s.blocks;  // not embedding, head
        }
      s.layers =
          layer_names[starts[mine.front()]] + " .. " + layer_names[starts[mine.back() + 1] - 1];
      s.in_flight = sim.peak_in_flight[r];  // micro-batch-stages, each of one stage's blocks
      add_params(s, params_of(modules));
      add_activations(s, static_cast<double>(s.blocks) / static_cast<double>(mine.size()),
                      schedule.stage_rank.back() == r);
      m.stages.push_back(s);
    }
  }
  const bool ckpt = t.activation_checkpointing;
  const StageMemory* peak = &m.stages.front();
  for (const auto& s : m.stages)
    if (s.total(ckpt) > peak->total(ckpt)) peak = &s;
  m.param_bytes = peak->param_bytes, m.grad_bytes = peak->grad_bytes;
  m.optimizer_bytes = peak->optimizer_bytes;
  m.activation_bytes = ckpt ? peak->activation_bytes_checkpointed : peak->activation_bytes;
  return m;
}

std::optional<std::string> zero_without_data_ranks(const Config& config,
                                                   const mesh::MeshShape& mesh) {
  const RunPlan planned = run_plan(config, mesh);
  const int64_t zero = zero_stage(config.parallel, planned.plan ? &*planned.plan : nullptr);
  if (zero == 0) return std::nullopt;
  // Sliced over the model's dp (with cp joined to it under context parallelism).
  const plan::ParallelDims dims(
      plan::ParallelDims(mesh, planned.plan ? &*planned.plan : nullptr).model_dims(), nullptr);
  if (dims.dp() > 1) return std::nullopt;
  // What it costs, when the config (not the plan, which parallel.zero=0 defers to) asks for it.
  double extra = 0;
  if (config.parallel.zero > 0) {
    Config without = config;
    without.parallel.zero = 0;
    extra = memory_per_rank(config, mesh).total() - memory_per_rank(without, mesh).total();
  }
  return "ZeRO stage " + std::to_string(zero) + " with dp=1 shards nothing" +
         (extra > 0 ? " and adds " + gib(extra) + " per rank (its fp32 copy of the weights)"
                    : "") +
         "; set parallel.zero=0, or add a dp dim to the mesh";
}

std::string mesh_on_nodes(const mesh::MeshShape& mesh, int64_t gpus_per_node) {
  const int64_t ranks = mesh.numel();
  std::string within, across;
  int64_t inner = 1;  // ranks spanned by the dims after this one (row-major: the last is fastest)
  for (int64_t i = mesh.ndim() - 1; i >= 0; --i) {
    const int64_t size = mesh.sizes()[i];
    std::string& side = inner * size <= gpus_per_node ? within : across;
    side = mesh.names()[i] + (side.empty() ? "" : ", " + side);
    inner *= size;
  }
  const int64_t nodes = (ranks + gpus_per_node - 1) / gpus_per_node;
  return std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + " of " +
         std::to_string(gpus_per_node) + ": " + (within.empty() ? "no dim" : within) +
         " within a node, " + (across.empty() ? "no dim" : across) + " across nodes";
}

std::string context_summary(const Config& config, const mesh::MeshShape& mesh) {
  const std::optional<plan::Plan> plan = run_plan(config, mesh).plan;
  const plan::ParallelDims dims(mesh, plan ? &*plan : nullptr);
  if (dims.cp() == 1) return "";
  const plan::ContextSpec c = plan::context_of(plan ? &*plan : nullptr);
  const int64_t T = config.train.seq_len;
  return "context " + dims.context + "=" + std::to_string(dims.cp()) + " (" +
         plan::to_string(c.attention) + (c.zigzag ? ", zigzag" : "") +
         "): " + std::to_string(T / dims.cp()) + " of " + std::to_string(T) + " tokens per rank";
}

std::string dry_run_report(const Config& config, const mesh::MeshShape& mesh,
                           int64_t gpus_per_node) {
  const MemoryEstimate m = memory_per_rank(config, mesh);
  const auto& names = mesh.names();
  char count[64];
  std::snprintf(count, sizeof(count), "%.2fB", static_cast<double>(m.parameters) / 1e9);
  std::string mesh_line;
  for (size_t i = 0; i < names.size(); ++i)
    mesh_line += (i ? ", " : "") + names[i] + "=" + std::to_string(mesh.sizes()[i]);
  std::string out;
  out += "model: " + config.model.type + ", " + count + " parameters (" +
         std::to_string(m.parameters) + ")\n";
  out += "mesh: " + mesh_line + " (" + std::to_string(mesh.numel()) + " ranks" +
         (gpus_per_node > 0 ? "; " + mesh_on_nodes(mesh, gpus_per_node) : "") + ")\n";
  const BatchLayout batch = run_plan(config, mesh).batch;
  out += "batch: " + std::to_string(batch.global()) + " sequences of " +
         std::to_string(config.train.seq_len) + " tokens per step (micro-batch " +
         std::to_string(batch.micro_batch) + " x " + std::to_string(batch.microbatches) +
         " micro-batches x " + std::to_string(batch.data_ranks) + " data ranks)\n";
  out += "plan: " +
         (config.parallel.plan.empty() ? std::string("none (every parameter replicated)")
                                       : config.parallel.plan) +
         "; zero " + std::to_string(m.zero) + (m.sequence_parallel ? "; sequence parallel" : "") +
         [&] {
           const std::string c = context_summary(config, mesh);
           return c.empty() ? c : "; " + c;
         }() +
         "\n";
  const auto& t = config.train;
  out +=
      "per rank (fp32 weights and grads; AdamW exp_avg + exp_avg_sq, under ZeRO plus an fp32 "
      "slice of the weights; activations of " +
      std::to_string(t.batch_size) + " x " + std::to_string(t.seq_len) +
      " tokens per micro-batch in " + to_string(t.dtype) + ", estimated):\n";
  char line[512];
  std::snprintf(line, sizeof(line), "  %-7s %-30s %6s %9s %9s %9s %11s %11s%s\n", "pp rank",
                "layers", "flight", "params", "grads", "optimizer", "activations", "act. (ckpt)",
                m.experts ? "   experts (of params+grads+optimizer)" : "");
  out += line;
  for (const auto& s : m.stages) {
    std::snprintf(line, sizeof(line), "  %-7d %-30s %6lld %9s %9s %9s %11s %11s", s.pp_rank,
                  s.layers.empty() ? "all" : s.layers.c_str(), static_cast<long long>(s.in_flight),
                  gib(s.param_bytes).c_str(), gib(s.grad_bytes).c_str(),
                  gib(s.optimizer_bytes).c_str(), gib(s.activation_bytes).c_str(),
                  gib(s.activation_bytes_checkpointed).c_str());
    out += line;
    if (m.experts) {
      std::snprintf(line, sizeof(line), " %9s", gib(s.expert_bytes).c_str());
      out += line;
    }
    out += "\n";
  }
  const double peak = m.total();
  const double device = 80e9;
  std::snprintf(line, sizeof(line),
                "peak per rank: %s with activation checkpointing %s (params %s, grads %s, "
                "optimizer %s, activations %s); an 80 GB device %s (%.0f%% headroom)\n",
                gib(peak).c_str(), t.activation_checkpointing ? "on" : "off",
                gib(m.param_bytes).c_str(), gib(m.grad_bytes).c_str(),
                gib(m.optimizer_bytes).c_str(), gib(m.activation_bytes).c_str(),
                peak <= 0.9 * device ? "fits"
                : peak <= device     ? "fits without 10% headroom"
                                     : "does not fit",
                100.0 * (1.0 - peak / device));
  out += line;
  if (auto w = zero_without_data_ranks(config, mesh)) out += "warning: " + *w + "\n";
  return out;
}

std::string schedule_report(const Config& config) {
  VESCALE_CHECK(!config.parallel.plan.empty(),
                "--print-schedule: parallel.plan is empty; name a "
                "plan with a \"pipeline\" section (e.g. configs/plans/llama_pp.json)");
  // The mesh's given sizes (a -1 dim as 1): the pipeline dim's size is what matters here.
  int64_t world = 1;
  for (const auto& [name, size] : config.parallel.mesh) world *= std::max<int64_t>(size, 1);
  // The plan once, with --set parallel.pipeline.* (which refuses a plan without the section).
  const plan::Plan plan = *run_plan(config, mesh::MeshShape(config.parallel.mesh, world)).plan;
  VESCALE_CHECK(plan.pipeline(), "--print-schedule: plan '", plan.source(),
                "' has no \"pipeline\" section");
  const plan::PipelineSpec& spec = *plan.pipeline();
  int64_t ranks = 0;
  for (const auto& [name, size] : config.parallel.mesh)
    if (name == spec.dim) ranks = size;
  VESCALE_CHECK(ranks >= 1, "--print-schedule: parallel.mesh must give the pipeline dim '",
                spec.dim, "' a size (e.g. --set 'parallel.mesh={\"", spec.dim, "\": 4}')");
  const auto schedule = parallel::pipeline::make_schedule(spec.schedule, static_cast<int>(ranks),
                                                          static_cast<int>(spec.microbatches),
                                                          static_cast<int>(spec.chunks));
  // Per-stage costs: the layers a stage holds, as the even split gives them.
  const double layers = static_cast<double>(config.model.options->n_layers() + 2);
  const double per_stage = layers / schedule.stages;
  parallel::pipeline::ActionCosts costs{per_stage, per_stage, per_stage, 0};
  return parallel::pipeline::render_timeline(schedule,
                                             parallel::pipeline::simulate(schedule, costs));
}

}  // namespace vescale::train
