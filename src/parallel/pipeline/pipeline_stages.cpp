#include "vescale/parallel/pipeline/pipeline_stages.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <set>

#include "vescale/common/check.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/parallel/pipeline/stages.h"

namespace vescale::parallel::pipeline {
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
                  "', which it does not have (a bug in the model's Model::layers)");
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

PipelineStages::~PipelineStages() = default;

PipelineStages::PipelineStages(std::shared_ptr<torch::nn::Module> whole,
                               const std::vector<LayerModules>& layers, const plan::Plan& plan,
                               const mesh::DeviceMesh& mesh, const std::string& device,
                               const std::function<void()>& init)
    : model_(std::move(whole)) {
  torch::nn::Module& model = *model_;
  const plan::PipelineSpec& spec = *plan.pipeline();
  const std::string src = "plan '" + plan.source() + "': pipeline";
  const auto& names = mesh.dim_names();
  VESCALE_CHECK(std::find(names.begin(), names.end(), spec.dim) != names.end(), src, ".dim '",
                spec.dim, "' is not a dim of parallel.mesh ", mesh.to_string(),
                "; add it to the mesh (e.g. {\"", spec.dim, "\": 2, \"dp\": -1})");
  const int ranks = static_cast<int>(mesh.size(spec.dim));
  schedule_ = make_schedule(spec.schedule, ranks, static_cast<int>(spec.microbatches),
                            static_cast<int>(spec.chunks));
  std::vector<std::string> layer_names;
  for (const auto& l : layers) layer_names.push_back(l.name);
  starts_ = stage_starts(layer_names, spec, schedule_.stages, plan.source());
  starts_.push_back(static_cast<int64_t>(layer_names.size()));

  std::vector<std::string> stage_dims;
  for (const auto& d : names)
    if (d != spec.dim) stage_dims.push_back(d);
  stage_mesh_ = mesh.submesh(stage_dims);
  me_ = static_cast<int>(mesh.coordinate(spec.dim));
  dim_ = spec.dim;
  device_ = device;

  // Which stages use each module: this rank keeps the modules of its own stages.
  std::map<std::string, std::set<int>> users;
  for (int s = 0; s < schedule_.stages; ++s)
    for (int64_t l = starts_[s]; l < starts_[s + 1]; ++l)
      for (const auto& m : layers[l].modules) users[m].insert(s);
  std::vector<std::string> mine;
  for (const auto& [m, stages] : users)
    for (int s : stages)
      if (schedule_.stage_rank[s] == me_) {
        mine.push_back(m);
        break;
      }
  root_ = stage_root(model, mine);
  std::set<const void*> kept;
  for (const auto& item : root_->named_parameters())
    kept.insert(item.value().unsafeGetTensorImpl());

  // This rank's parameters and every buffer get storage on its device (the init fills them,
  // below); the other stages' stay meta: no memory, but parallelize and the init still see
  // them, so every random fill takes the offset it has on one device.
  {
    c10::NoGradGuard no_grad;
    const at::Device dev(device);
    for (const auto& item : model.named_parameters())
      if (kept.count(item.value().unsafeGetTensorImpl())) materialize_in_place(item.value(), dev);
    for (const auto& item : model.named_buffers()) materialize_in_place(item.value(), dev);
  }
  plan::Plan stage_plan(stage_mesh_.dim_names());
  if (plan.mesh_dims().empty()) {
    stage_plan.shard("*", dtensor::Placements(stage_mesh_.ndim(), dtensor::Replicate()));
  } else {
    stage_plan = plan;
  }
  parallel::parallelize(model, stage_plan, stage_mesh_,
                        {.init = init, .plain_on_one_device = true});

  // Weights used by stages on several pipeline ranks (tied embeddings): their gradients are
  // summed over those ranks; one group per such set, made now on every member.
  std::map<std::set<int>, std::vector<std::string>> shared;
  for (const auto& [m, stages] : users) {
    std::set<int> ranks_using;
    for (int s : stages) ranks_using.insert(schedule_.stage_rank[s]);
    if (ranks_using.size() > 1) shared[ranks_using].push_back(m);
  }
  std::map<std::string, at::Tensor> stage_params;
  for (const auto& item : root_->named_parameters()) stage_params[item.key()] = item.value();
  // A fresh key per instance (every rank builds them in the same order): a second one in the
  // process must not meet the first one's rendezvous keys in the store.
  static int instances = 0;
  const std::string key_prefix = "pipeline-shared" + std::to_string(instances++) + "/";
  for (const auto& [pp_ranks, modules] : shared) {
    std::vector<int> world;
    auto coord = mesh.coordinate();
    const int64_t d = mesh.shape().index(spec.dim);
    for (int q : pp_ranks) {
      coord[d] = q;
      world.push_back(static_cast<int>(mesh.shape().rank_at(coord)));
    }
    std::sort(world.begin(), world.end());
    if (!pp_ranks.count(me_)) continue;
    std::string key = key_prefix;
    for (const auto& m : modules) key += m + ",";
    key += std::to_string(mesh.shape().group_index(mesh.rank(), 1u << d));
    SharedWeights sw{dist::new_group(key, world), {}, *pp_ranks.begin() == me_};
    for (const auto& m : modules)
      for (const auto& [name, param] : stage_params)
        if (name == m || name.rfind(m + ".", 0) == 0) sw.params.push_back(param);
    shared_.push_back(std::move(sw));
  }
  pp_group_ = mesh.group(spec.dim);
}

std::string PipelineStages::describe(const std::vector<LayerModules>& layers) const {
  std::string s;
  for (int x : schedule_.stages_of(me_))
    s += (s.empty() ? "" : ", ") + std::to_string(x) + " (" + layers[starts_[x]].name + " .. " +
         layers[starts_[x + 1] - 1].name + ")";
  return "pipeline: " + std::string(to_string(schedule_.kind)) + " on " + std::to_string(schedule_.ranks) + " ranks, " +
         std::to_string(schedule_.stages) + " stages, " + std::to_string(schedule_.microbatches) +
         " micro-batches; this rank runs stages " + s;
}

void PipelineStages::sum_over_pipeline(at::Tensor& t) { pp_group_.all_reduce(t).wait(); }

void PipelineStages::reduce_shared_grads() {
  for (auto& sw : shared_)
    for (auto& w : sw.params) {
      if (!w.grad().defined()) continue;
      at::Tensor local = dtensor::is_dtensor(w.grad()) ? dtensor::to_local(w.grad()) : w.grad();
      VESCALE_CHECK(local.is_contiguous(),
                    "pipeline: a shared weight's gradient is not contiguous");
      sw.group.all_reduce(local).wait();
    }
}

// Each rank's sum of squares, less the copies of shared weights held by other ranks than the
// first of their set, summed over the pipeline ranks.
at::Tensor PipelineStages::sum_across_stages(const at::Tensor& sum_sq) {
  at::Tensor local = plain_value(sum_sq).to(at::kFloat).reshape({1}).clone();
  for (const auto& sw : shared_) {
    if (sw.first) continue;
    for (const auto& w : sw.params)
      if (w.grad().defined())
        local -= plain_value(w.grad().to(at::kFloat).square().sum()).reshape({1});
  }
  pp_group_.all_reduce(local).wait();
  at::Tensor total = local.reshape({});
  if (!dtensor::is_dtensor(sum_sq)) return total;
  return dtensor::from_local(
      total, dtensor::spec_of(sum_sq).mesh,
      dtensor::Placements(dtensor::spec_of(sum_sq).placements.size(), dtensor::Replicate()),
      std::vector<int64_t>{});
}

double PipelineStages::last_stage_mean(const at::Tensor& sum, bool runs_last_stage, int64_t count,
                                       int world_rank) {
  at::Tensor value =
      at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(at::Device(device_)));
  if (runs_last_stage) value.copy_(plain_value(sum).to(at::kDouble).reshape({1}));
  const int last = schedule_.stage_rank.back();
  try {
    pp_group_.broadcast(value, last).wait();
  } catch (const TimeoutError& e) {
    // As the runner's waits: name the stage's rank the loss should have come from.
    throw TimeoutError("pipeline: rank " + std::to_string(world_rank) +
                       " waited in vain for the loss of the last stage from pipeline rank " +
                       std::to_string(last) + " (world rank " +
                       std::to_string(pp_group_.global_ranks().at(last)) +
                       "), which hung or failed: " + e.what());
  }
  return value.item<double>() / static_cast<double>(count);
}

}  // namespace vescale::parallel::pipeline
