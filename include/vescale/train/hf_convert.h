// Checkpoints to Hugging Face folders and back (vescale-convert; docs/models.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vescale/models/model.h"  // models/: StateDict
#include "vescale/train/config.h"

namespace vescale::train {

// One of our checkpoints (a step folder, or a root holding `latest`) in one process: the folder,
// the config it recorded, and its model's tensors (parameters and state buffers) whole, under
// our names. Not collective. `who` starts its error messages.
struct CheckpointWeights {
  std::string folder;
  Config config;
  models::StateDict weights;
};
CheckpointWeights read_checkpoint_weights(const std::string& checkpoint, const std::string& who);

// The config of a Hugging Face folder: model.* from its config.json (llama, mixtral, gpt2),
// model.init_from set to the folder.
Config hf_folder_config(const std::string& hf_dir, const std::string& who);

struct HfExportOptions {
  DType dtype = DType::Fp32;  // the weights as stored
  int64_t max_shard_bytes =
      5LL << 30;  // split into files of at most this (one tensor may exceed it)
  // `out` may hold files: a model's files there (weights, index, configs, tokenizer) are removed
  // first, so no later load mixes two models. Without it, a non-empty `out` is an error.
  bool overwrite = false;
};

// One of our checkpoints (a folder, or a root holding `latest`), saved at any world size with
// or without ZeRO, to a Hugging Face folder `out`: config.json (from the config the checkpoint
// recorded), model.safetensors or model-0000i-of-0000n.safetensors with
// model.safetensors.index.json, generation_config.json, and with the run's data.tokenizer its
// tokenizer.json and a tokenizer_config.json (so transformers' AutoTokenizer and vescale-generate
// --hf read the folder alone). Not collective: one process reads what it needs. Returns the
// files written.
std::vector<std::string> export_hf(const std::string& checkpoint, const std::string& out,
                                   const HfExportOptions& options = {});

// A Hugging Face folder to one of our checkpoints, root/step-00000000 (the weights under
// "model/<name>", the config taken from config.json in its metadata): for checkpoint::load and
// export_hf. Training from Hugging Face weights is model.init_from. A root that already holds
// checkpoints is an error (it would move their `latest`) unless `overwrite`, which removes them
// first. Returns the folder.
std::string import_hf(const std::string& hf_dir, const std::string& root, bool overwrite = false);

}  // namespace vescale::train
