// Training from Hugging Face weights through the config (model.init_from): transformers-made
// tiny LLaMA (GQA, llama3 RoPE scaling), Mixtral and GPT-2 (tests/models/hf_reference.py) load
// with model.* taken from their config.json, compute transformers' loss on its reference batch
// before any step, and train 5 steps under TP=2 exactly as on one rank. A config that disagrees
// with config.json is refused, naming the field.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/train_util.h"
#include "vescale/checkpoint/safetensors.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/tokenizer/token_file.h"
#include "vescale/train/trainer.h"

using namespace vescale;
using namespace vescale::train;

namespace {

const std::string kHf = HF_REFERENCE_DIR;

// Tokens below the tiny models' vocabulary (96), with a pattern to learn; one file per rank.
std::string token_file() {
  const auto path = std::filesystem::temp_directory_path() /
                    ("vescale_hf_tokens_" + std::to_string(::getpid()) + ".bin");
  std::vector<int64_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int64_t>((i * 7 + i / 13) % 96);
  tokenizer::write_token_file(path.string(), tokens);
  return path.string();
}

Config hf_config(const std::string& family, const std::string& base, const std::string& data,
                 const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o{"model.init_from=\"" + kHf + "/" + family + "\"",
                             "model.from_hf_config=true",
                             "train.batch_size=2",
                             "train.seq_len=12",
                             "train.steps=5",
                             "train.warmup_steps=1",
                             "train.lr=1e-3",
                             "log.metrics_jsonl=\"\"",
                             "data.train=\"" + data + "\""};
  o.insert(o.end(), extra.begin(), extra.end());
  return Config::from_file(testing::repo_file(base), o);
}

std::vector<double> losses_of(Trainer& t) {
  std::vector<double> out;
  for (int s = 0; s < 5; ++s) out.push_back(t.step(s).loss);
  return out;
}

void check_family(const std::string& family, const std::string& base, const std::string& plan) {
  const std::string data = token_file();
  auto world = mesh::DeviceMesh::init({{"tp", 2}});
  // One rank (a 1-rank mesh of this rank's own).
  Trainer one(hf_config(family, base, data), world.submesh({}));
  {
    // Before any step: transformers' loss on its reference batch (HF's shift: predict t + 1).
    const auto ref = checkpoint::load_safetensors(kHf + "/" + family + "/reference.safetensors");
    const auto& tokens = ref.at("tokens");
    const int64_t T = tokens.size(1);
    at::Tensor logits = one.model().forward(tokens);
    const int64_t V = logits.size(-1);
    const double loss = at::cross_entropy_loss(logits.narrow(1, 0, T - 1).reshape({-1, V}),
                                               tokens.narrow(1, 1, T - 1).reshape({-1}))
                            .item<double>();
    INFO(family << ": loss " << loss << ", transformers' " << ref.at("loss").item<double>());
    CHECK(std::abs(loss - ref.at("loss").item<double>()) <= 1e-5);
  }
  const auto want = losses_of(one);
  Config cfg = hf_config(family, base, data);
  cfg.parallel.plan = testing::repo_file(plan);
  cfg.parallel.mesh = {{"tp", 2}};
  Trainer tp(std::move(cfg), world);
  const auto got = losses_of(tp);
  for (size_t s = 0; s < want.size(); ++s) {
    INFO(family << " step " << s + 1 << ": TP=2 " << got[s] << ", one rank " << want[s]);
    CHECK(std::abs(got[s] - want[s]) <= 1e-5 * std::abs(want[s]));
  }
  std::filesystem::remove(data);
}

}  // namespace

TEST_CASE("LLaMA from Hugging Face weights: transformers' loss, then TP=2 trains like one rank",
          "[hf][world2]") {
  check_family("llama", "configs/llama_tiny.json", "configs/plans/llama_tp.json");
}

TEST_CASE("Mixtral from Hugging Face weights: transformers' loss, then TP=2 trains like one rank",
          "[hf][world2]") {
  check_family("mixtral", "configs/mixtral_tiny.json", "configs/plans/mixtral_tp.json");
}

TEST_CASE("GPT-2 from Hugging Face weights: transformers' loss, then TP=2 trains like one rank",
          "[hf][world2]") {
  check_family("gpt2", "configs/nanogpt_tiny.json", "configs/plans/gpt2_tp.json");
}

TEST_CASE("model.init_from: a config that disagrees with config.json names the field",
          "[hf][world2]") {
  CHECK_THROWS_WITH(Config::from_file(testing::repo_file("configs/llama_tiny.json"),
                                      {"model.init_from=\"" + kHf + "/llama\""}),
                    Catch::Matchers::Contains("model.vocab_size is 256") &&
                        Catch::Matchers::Contains("config.json says 96") &&
                        Catch::Matchers::Contains("model.from_hf_config=true"));
  CHECK_THROWS_WITH(Config::from_file(testing::repo_file("configs/llama_tiny.json"),
                                      {"model.init_from=\"/nonexistent/hf\""}),
                    Catch::Matchers::Contains("no /nonexistent/hf/config.json"));
  CHECK_THROWS_WITH(Config::from_file(testing::repo_file("configs/nanogpt_tiny.json"),
                                      {"model.init_from=\"" + kHf + "/llama\""}),
                    Catch::Matchers::Contains("model_type 'llama', not gpt2"));
}
