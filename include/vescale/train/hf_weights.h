// Hugging Face folders in: model.init_from (the trainer), vescale-convert (docs/models.md).
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "vescale/train/config.h"
#include "vescale/train/model_factory.h"

namespace vescale::train {

// Every weight of a Hugging Face folder (model.safetensors, or the files of
// model.safetensors.index.json) under its Hugging Face name, as views of private memory maps:
// nothing is read until used.
std::map<std::string, at::Tensor> map_hf_weights(const std::string& dir);

// The folder's model.safetensors, or every file of model.safetensors.index.json, mapped (not
// read: each rank touches only the pages of what it copies), turned into our names and layouts
// by the family's adapter, and copied into every parameter this rank holds: its shard of a
// DTensor, the whole of a plain tensor. Parameters on the meta device (other pipeline stages)
// are skipped. Throws naming a missing file, a missing or unexpected weight, or a shape that
// differs.
void load_hf_weights(const std::string& dir, const Model& model, const ModelConfig& config);

}  // namespace vescale::train
