// vescale-convert's library half: a checkpoint vescale-train wrote (LLaMA, Mixtral, GPT-2,
// saved by 2 steps of training) to a Hugging Face folder in fp32 and in bf16, with our logits
// on fixed tokens beside it; and the transformers-made reference models HF -> ours -> HF,
// split into small files. The ctest models.hf_reads_export then loads every folder in
// transformers (tests/models/hf_reference.py --check-export).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "vescale/checkpoint/safetensors.h"
#include "vescale/train/hf_convert.h"
#include "vescale/train/trainer.h"

using namespace vescale;
using namespace vescale::train;
namespace fs = std::filesystem;

namespace {

const fs::path kOut = fs::path(HF_EXPORT_DIR);

void export_trained(const std::string& name, const std::string& base,
                    const std::vector<std::string>& shape) {
  const fs::path ck = fs::temp_directory_path() / ("vescale_export_" + name);
  fs::remove_all(ck);
  std::vector<std::string> o{"train.steps=2", "train.batch_size=2", "train.seq_len=16",
                             "log.metrics_jsonl=\"\"", "checkpoint.dir=\"" + ck.string() + "\""};
  o.insert(o.end(), shape.begin(), shape.end());
  Trainer t(Config::from_file(std::string(VESCALE_SOURCE_DIR "/configs/") + base, o));
  t.run();
  const fs::path out = kOut / name;
  fs::remove_all(out);
  const auto files = export_hf(ck.string(), out.string(), {DType::Fp32, 64 << 10});
  for (const char* f : {"config.json", "generation_config.json"})
    CHECK(std::find(files.begin(), files.end(), f) != files.end());
  // A byte-level run has no tokenizer to copy.
  CHECK(std::find(files.begin(), files.end(), "tokenizer.json") == files.end());
  CHECK(std::find(files.begin(), files.end(), "model.safetensors.index.json") != files.end());
  // Every file but the index is below the limit, or holds a single tensor.
  for (const auto& f : files) {
    if (f.find(".safetensors") == std::string::npos || f.find("index") != std::string::npos)
      continue;
    const auto tensors = checkpoint::load_safetensors((out / f).string());
    CHECK((fs::file_size(out / f) <= (64u << 10) + 4096 || tensors.size() == 1));
  }
  // Our logits on fixed tokens, for transformers to match.
  at::manual_seed(3);
  const auto tokens = at::randint(0, 256, {2, 12}, at::kLong);
  c10::NoGradGuard ng;
  t.model().module->eval();
  checkpoint::save_safetensors((out / "ours.safetensors").string(),
                               {{"tokens", tokens}, {"logits", t.model().forward(tokens)}});
  // bf16: the same names, half the bytes.
  const fs::path bf = fs::temp_directory_path() / ("vescale_export_bf16_" + name);
  fs::remove_all(bf);
  export_hf(ck.string(), bf.string(), {DType::Bf16, 5LL << 30});
  const auto half = checkpoint::load_safetensors((bf / "model.safetensors").string());
  for (const auto& [k, v] : half) CHECK(v.scalar_type() == at::kBFloat16);
  CHECK(nlohmann::json::parse(std::ifstream(bf / "config.json"))["torch_dtype"] == "bfloat16");
  fs::remove_all(bf);
  fs::remove_all(ck);
}

}  // namespace

TEST_CASE("vescale-convert: trained checkpoints to Hugging Face folders", "[hf_export]") {
  const std::vector<std::string> attn{"model.dim=32", "model.n_layers=2", "model.n_heads=4",
                                      "model.n_kv_heads=2", "model.max_seq_len=16"};
  auto llama = attn;
  llama.push_back("model.ffn_dim=64");
  export_trained("llama", "llama_tiny.json", llama);
  auto mixtral = attn;
  mixtral.insert(mixtral.end(), {"model.ffn_dim=32", "model.n_experts=4", "model.top_k=2"});
  export_trained("mixtral", "mixtral_tiny.json", mixtral);
  export_trained("gpt2", "nanogpt_tiny.json",
                 {"model.n_embd=32", "model.n_layer=2", "model.n_head=4", "model.n_positions=16"});
}

TEST_CASE("vescale-convert: Hugging Face -> ours -> Hugging Face", "[hf_export]") {
  for (const std::string m : {"llama", "mixtral", "gpt2"}) {
    const fs::path ck = fs::temp_directory_path() / ("vescale_roundtrip_" + m);
    fs::remove_all(ck);
    const std::string folder = import_hf(std::string(HF_REFERENCE_DIR) + "/" + m, ck.string());
    CHECK(fs::exists(fs::path(folder) / "index.json"));
    const fs::path out = kOut / ("roundtrip_" + m);
    fs::remove_all(out);
    export_hf(folder, out.string(), {DType::Fp32, 16 << 10});
    fs::remove_all(ck);
  }
  // What does not convert says why.
  CHECK_THROWS_WITH(import_hf("/nonexistent", "/tmp/x"),
                    Catch::Contains("no /nonexistent/config.json"));
  CHECK_THROWS_WITH(export_hf("/nonexistent", "/tmp/x"),
                    Catch::Contains("neither a checkpoint folder"));
}
