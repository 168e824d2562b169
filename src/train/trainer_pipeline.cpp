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
#include "vescale/parallel/pipeline/stages.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/train/model_factory.h"
#include "vescale/train/trainer.h"

namespace vescale::train {
namespace {

// A module that holds the given submodules of `full` under their own FQNs ("layers.17" becomes
// child "layers" -> child "17"), so its named_parameters() are this stage's, by global name.
std::shared_ptr<torch::nn::Module> stage_root(torch::nn::Module& full,
                                              const std::vector<std::string>& fqns) {
  std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
  for (const auto& m : full.named_modules("", false)) modules[m.key()] = m.value();
  auto root = std::make_shared<torch::nn::Module>("PipelineStage");
  std::map<std::string, std::shared_ptr<torch::nn::Module>> made = {{"", root}};
  for (const auto& fqn : fqns) {
    auto it = modules.find(fqn);
    VESCALE_CHECK(it != modules.end(), "pipeline: the model names layer module '", fqn,
                  "', which it does not have (a bug in the model's pipeline_layers)");
    std::string parent;
    size_t start = 0;
    for (size_t dot = fqn.find('.'); dot != std::string::npos; dot = fqn.find('.', start)) {
      const std::string part = fqn.substr(start, dot - start);
      const std::string path = parent.empty() ? part : parent + "." + part;
      if (!made.count(path))
        made[path] = made[parent]->register_module(part, std::make_shared<torch::nn::Module>());
      parent = path;
      start = dot + 1;
    }
    made[parent]->register_module(fqn.substr(start), it->second);
  }
  return root;
}

// A meta tensor's impl gets storage of its shape on `device` (uninitialised; set_data refuses
// a device change): every module holding it sees the change.
void materialize_in_place(const at::Tensor& t, const at::Device& device) {
  if (!t.is_meta()) return;
  at::Tensor real = at::empty(t.sizes(), t.options().device(device));
  t.unsafeGetTensorImpl()->shallow_copy_from(real.getIntrusivePtr());
}

at::Tensor plain_value(const at::Tensor& t) {
  if (!dtensor::is_dtensor(t)) return t;
  const dtensor::Placements r(dtensor::spec_of(t).placements.size(), dtensor::Replicate());
  return dtensor::to_local(dtensor::redistribute(t, r));
}

}  // namespace

bool has_block(torch::nn::Module& root, const std::string& pattern) {
  for (const auto& m : root.named_modules("", false))
    if (component_match(pattern, m.key())) return true;
  return false;
}

int64_t Trainer::microbatches() const {
  return pipeline_ ? pipeline_->schedule.microbatches : config_.train.grad_accum;
}

const parallel::pipeline::Schedule* Trainer::pipeline_schedule() const {
  return pipeline_ ? &pipeline_->schedule : nullptr;
}

const parallel::pipeline::RunnerStats* Trainer::pipeline_stats() const {
  return pipeline_ ? &pipeline_->runner->last_step() : nullptr;
}

bool Trainer::has_shared_weights() const { return pipeline_ && !pipeline_->shared.empty(); }

const mesh::DeviceMesh& Trainer::stage_mesh() const { return pipeline_->stage_mesh; }

void Trainer::setup_pipeline(const plan::Plan& plan) {
  namespace pp = parallel::pipeline;
  const plan::PipelineSpec& spec = *plan.pipeline();
  const std::string src = "plan '" + plan.source() + "': pipeline";
  const auto& names = mesh_->dim_names();
  VESCALE_CHECK(std::find(names.begin(), names.end(), spec.dim) != names.end(), src, ".dim '",
                spec.dim, "' is not a dim of parallel.mesh ", mesh_->to_string(),
                "; add it to the mesh (e.g. {\"", spec.dim, "\": 2, \"dp\": -1})");
  VESCALE_CHECK(!model_.pipeline_layers.empty(), "model.type '", config_.model.type,
                "' cannot be pipelined yet (its builder lists no pipeline layers); use a plan "
                "without \"pipeline\"");
  const auto& t = config_.train;
  VESCALE_CHECK(t.grad_accum == 1 || t.grad_accum == spec.microbatches, "train.grad_accum=",
                t.grad_accum, " but ", src, ".microbatches=", spec.microbatches,
                ": a pipeline's micro-batches are the step's accumulation; set train.grad_accum "
                "to 1 (or to the same number)");

  auto p = std::make_unique<PipelineTraining>();
  const int ranks = static_cast<int>(mesh_->size(spec.dim));
  p->schedule = pp::make_schedule(spec.schedule, ranks, static_cast<int>(spec.microbatches),
                                  static_cast<int>(spec.chunks));
  std::vector<std::string> layer_names;
  for (const auto& l : model_.pipeline_layers) layer_names.push_back(l.name);
  p->starts = pp::stage_starts(layer_names, spec, p->schedule.stages, plan.source());
  p->starts.push_back(static_cast<int64_t>(layer_names.size()));

  std::vector<std::string> stage_dims;
  for (const auto& d : names)
    if (d != spec.dim) stage_dims.push_back(d);
  p->stage_mesh = mesh_->submesh(stage_dims);
  const int me = static_cast<int>(mesh_->coordinate(spec.dim));

  // Which stages use each module: this rank keeps the modules of its own stages.
  std::map<std::string, std::set<int>> users;
  for (int s = 0; s < p->schedule.stages; ++s)
    for (int64_t l = p->starts[s]; l < p->starts[s + 1]; ++l)
      for (const auto& m : model_.pipeline_layers[l].modules) users[m].insert(s);
  std::vector<std::string> mine;
  for (const auto& [m, stages] : users)
    for (int s : stages)
      if (p->schedule.stage_rank[s] == me) {
        mine.push_back(m);
        break;
      }
  auto root = stage_root(*model_.module, mine);
  std::set<const void*> kept;
  for (const auto& item : root->named_parameters()) kept.insert(item.value().unsafeGetTensorImpl());

  // The model was built on the meta device. This rank's parameters and every buffer get storage
  // on its device (the init fills them, below); the other stages' stay meta: no memory, but
  // parallelize and the init still see them, so every random fill takes the offset it has on one
  // device.
  {
    c10::NoGradGuard no_grad;
    const at::Device dev(device_);
    for (const auto& item : model_.module->named_parameters())
      if (kept.count(item.value().unsafeGetTensorImpl())) materialize_in_place(item.value(), dev);
    for (const auto& item : model_.module->named_buffers()) materialize_in_place(item.value(), dev);
  }
  plan::Plan stage_plan(p->stage_mesh.dim_names());
  if (plan.mesh_dims().empty()) {
    stage_plan.shard("*", dtensor::Placements(p->stage_mesh.ndim(), dtensor::Replicate()));
  } else {
    stage_plan = plan;
  }
  parallel::parallelize(*model_.module, stage_plan, p->stage_mesh,
                    {.init = model_.init, .plain_on_one_device = true});
  p->full_model = model_.module;
  model_.module = root;

  // Weights used by stages on several pipeline ranks (tied embeddings): their gradients are
  // summed over those ranks; one group per such set, made now on every member.
  std::map<std::set<int>, std::vector<std::string>> shared;
  for (const auto& [m, stages] : users) {
    std::set<int> ranks_using;
    for (int s : stages) ranks_using.insert(p->schedule.stage_rank[s]);
    if (ranks_using.size() > 1) shared[ranks_using].push_back(m);
  }
  std::map<std::string, at::Tensor> stage_params;
  for (const auto& item : root->named_parameters()) stage_params[item.key()] = item.value();
  // A fresh key per trainer (every rank builds its trainers in the same order): a second
  // trainer in the process must not meet the first one's rendezvous keys in the store.
  static int trainers = 0;
  const std::string key_prefix = "pipeline-shared" + std::to_string(trainers++) + "/";
  for (const auto& [pp_ranks, modules] : shared) {
    std::vector<int> world;
    auto coord = mesh_->coordinate();
    const int64_t d = mesh_->shape().index(spec.dim);
    for (int q : pp_ranks) {
      coord[d] = q;
      world.push_back(static_cast<int>(mesh_->shape().rank_at(coord)));
    }
    std::sort(world.begin(), world.end());
    if (!pp_ranks.count(me)) continue;
    std::string key = key_prefix;
    for (const auto& m : modules) key += m + ",";
    key += std::to_string(mesh_->shape().group_index(mesh_->rank(), 1u << d));
    SharedWeights sw{dist::new_group(key, world), {}, *pp_ranks.begin() == me};
    for (const auto& m : modules)
      for (const auto& [name, param] : stage_params)
        if (name == m || name.rfind(m + ".", 0) == 0) sw.params.push_back(param);
    p->shared.push_back(std::move(sw));
  }

  const auto shard = data_shard(p->stage_mesh);
  dp_rank_ = shard.rank, dp_size_ = shard.size;
  p->pp_group = mesh_->group(spec.dim);
  p->dim = spec.dim;
  p->me = me;
  pipeline_ = std::move(p);
  log::info("pipeline: " + spec.schedule + " on " + std::to_string(ranks) + " ranks, " +
            std::to_string(pipeline_->schedule.stages) + " stages, " +
            std::to_string(spec.microbatches) + " micro-batches; this rank runs stages " +
            [&] {
              std::string s;
              for (int x : pipeline_->schedule.stages_of(me))
                s += (s.empty() ? "" : ", ") + std::to_string(x) + " (" +
                     layer_names[pipeline_->starts[x]] + " .. " +
                     layer_names[pipeline_->starts[x + 1] - 1] + ")";
              return s;
            }());
}

void Trainer::start_pipeline_runner() {
  namespace pp = parallel::pipeline;
  PipelineTraining& p = *pipeline_;
  std::vector<pp::StageForward> forwards;
  for (int s : p.schedule.stages_of(p.me)) {
    const int64_t begin = p.starts[s], end = p.starts[s + 1];
    const bool bf16 = config_.train.dtype == DType::Bf16;
    const at::DeviceType dt = at::Device(device_).type();
    std::vector<std::string> names;
    for (int64_t l = begin; l < end; ++l) names.push_back(model_.pipeline_layers[l].name);
    const bool any_block = end - begin > (begin == 0 ? 1 : 0) + (end == static_cast<int64_t>(model_.pipeline_layers.size()) ? 1 : 0);
    forwards.push_back({s, [this, begin, end, bf16, dt, names, any_block](const std::vector<at::Tensor>& in) {
                          // As loss_of around the whole model (the loss stays fp32).
                          Bf16Autocast autocast(bf16, dt);
                          at::Tensor y = in.at(0);
                          for (int64_t l = begin; l < end; ++l)
                            y = model_.pipeline_layers[l].forward(y);
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
  p.runner = std::make_unique<pp::PipelineRunner>(p.schedule, *mesh_, p.dim, std::move(forwards),
                                                  &p.stage_mesh, std::move(opts));
  // The norm over every stage: each rank's sum of squares, less the copies of shared weights
  // held by other ranks than the first of their set, summed over the pipeline ranks.
  optimizer_->set_norm_across([this](const at::Tensor& sum_sq) {
    PipelineTraining& q = *pipeline_;
    at::Tensor local = plain_value(sum_sq).to(at::kFloat).reshape({1}).clone();
    for (const auto& sw : q.shared) {
      if (sw.first) continue;
      for (const auto& w : sw.params)
        if (w.grad().defined()) local -= plain_value(w.grad().to(at::kFloat).square().sum()).reshape({1});
    }
    q.pp_group.all_reduce(local).wait();
    at::Tensor total = local.reshape({});
    if (!dtensor::is_dtensor(sum_sq)) return total;
    return dtensor::from_local(total, dtensor::spec_of(sum_sq).mesh,
                               dtensor::Placements(dtensor::spec_of(sum_sq).placements.size(),
                                                   dtensor::Replicate()),
                               std::vector<int64_t>{});
  });
}

double Trainer::pipeline_forward_backward(const std::vector<DataLoader::Batch>& batches,
                                          bool training) {
  PipelineTraining& p = *pipeline_;
  const at::Device dev(device_);
  const mesh::DeviceMesh* m = &p.stage_mesh;
  auto input = [&](int mb) { return to_model_input(batches.at(mb).inputs.to(dev), m); };
  auto loss = [&](const std::vector<at::Tensor>& outputs, int mb) {
    at::Tensor l = lm_loss(outputs.at(0), to_model_input(batches.at(mb).targets.to(dev), m));
    if (model_.pipeline_aux.loss && outputs.size() > 1) l = l + model_.pipeline_aux.loss(outputs[1]);
    return l;
  };
  at::Tensor sum = training ? p.runner->train_step(input, loss)
                            : p.runner->eval_step(input, loss, static_cast<int>(batches.size()));
  // The last stage's sum, to every rank (the log and the divergence guard read it on each).
  at::Tensor value = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(dev));
  if (p.runner->runs_last_stage()) value.copy_(plain_value(sum).to(at::kDouble).reshape({1}));
  const int last = p.schedule.stage_rank.back();
  try {
    p.pp_group.broadcast(value, last).wait();
  } catch (const TimeoutError& e) {
    // As the runner's waits: name the stage's rank the loss should have come from.
    throw TimeoutError("pipeline: rank " + std::to_string(rank_) +
                       " waited in vain for the loss of the last stage from pipeline rank " +
                       std::to_string(last) + " (world rank " +
                       std::to_string(p.pp_group.global_ranks().at(last)) +
                       "), which hung or failed: " + e.what());
  }
  return value.item<double>() / static_cast<double>(batches.size());
}

void Trainer::reduce_shared_weights() {
  for (auto& sw : pipeline_->shared)
    for (auto& w : sw.params) {
      if (!w.grad().defined()) continue;
      at::Tensor local = dtensor::is_dtensor(w.grad()) ? dtensor::to_local(w.grad()) : w.grad();
      VESCALE_CHECK(local.is_contiguous(), "pipeline: a shared weight's gradient is not contiguous");
      sw.group.all_reduce(local).wait();
    }
}

}  // namespace vescale::train
