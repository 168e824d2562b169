// Internal: model.init_from, a Hugging Face folder's weights into the trainer's model under any
// plan and mesh (docs/models.md).
#pragma once
#include <string>

#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

// The folder's model.safetensors, or every file of model.safetensors.index.json, mapped (not
// read: each rank touches only the pages of what it copies), turned into our names and layouts
// by the family's adapter, and copied into every parameter this rank holds: its shard of a
// DTensor, the whole of a plain tensor. Parameters on the meta device (other pipeline stages)
// are skipped. Throws naming a missing file, a missing or unexpected weight, or a shape that
// differs.
void load_hf_weights(const std::string& dir, const Model& model, const ModelConfig& config);

}  // namespace vescale::train
