#include "vescale/train/model_layout.h"

#include <torch/nn/module.h>

#include <vector>

#include "train/trainer_internal.h"
#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/models/shared/meta_device.h"
#include "vescale/parallel/parallelize.h"
#include "vescale/train/hf_weights.h"

namespace vescale::train {
namespace {

std::vector<parallel::pipeline::LayerModules> layer_modules(const Model& model) {
  std::vector<parallel::pipeline::LayerModules> layers;
  for (const auto& l : model.layers) layers.push_back({l.name, l.modules});
  return layers;
}

}  // namespace

LaidOutModel lay_out_model(const Config& config, const plan::Plan* plan,
                           const mesh::DeviceMesh* mesh, const std::string& device) {
  LaidOutModel out;
  out.replica_mesh = mesh;
  if (plan && plan->pipeline()) {
    // Each rank keeps only its stages: build without memory; the stages give this rank's
    // parameters (and the buffers) storage on its device, parallelized on the stages' mesh.
    {
      models::MetaDeviceScope meta;
      out.model = build_model(config.model);
    }
    const auto layers = layer_modules(out.model);
    out.stages = std::make_unique<parallel::pipeline::PipelineStages>(
        out.model.module, layers, *plan, *mesh, device, out.model.init);
    out.model.module = out.stages->root();
    log::info(out.stages->describe(layers));
    out.replica_mesh = &out.stages->stage_mesh();
    VESCALE_CHECK(zero_stage(config.parallel, plan) == 0 || !out.stages->has_shared_weights(),
                  "ZeRO with weights tied across pipeline stages (tied embeddings) is not "
                  "supported yet; set parallel.zero=0 or untie them");
  } else {
    out.model = build_model(config.model);
    if (device != "cpu") out.model.module->to(at::Device(device));
    if (plan)
      parallel::parallelize(*out.model.module, *plan, *mesh,
                            {.init = out.model.init, .plain_on_one_device = true});
  }
  // After the layout, before the reducer and the optimizer see the parameters (ZeRO-3 reshapes
  // their storage).
  if (!config.model.init_from.empty())
    load_hf_weights(config.model.init_from, out.model, config.model);
  return out;
}

}  // namespace vescale::train
