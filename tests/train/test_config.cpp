// The train config: defaults, every error message (key path, file, suggestion), --set, and
// every shipped config parses.
#include <catch2/catch.hpp>

#include <filesystem>

#include "vescale/common/check.h"
#include "vescale/models/gpt/gpt_options.h"
#include "vescale/models/llama/llama_options.h"
#include "vescale/train/config.h"
#include "vescale/train/peak_flops.h"

using Catch::Matchers::Contains;
using vescale::train::Config;
using vescale::train::DType;
using vescale::train::gpu_peak_flops;
using vescale::train::resolve_peak_flops;

namespace {
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    Config::from_json(text, "t.json", overrides);
  } catch (const vescale::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("config defaults follow TorchTitan / nanoGPT", "[config]") {
  auto c = Config::from_json("{}");
  CHECK(c.model.type == "gpt");
  CHECK(c.model.as<vescale::models::GPTOptions>().n_embd == 768);
  CHECK(c.model.as<vescale::models::GPTOptions>().n_layer == 12);
  CHECK(c.model.as<vescale::models::GPTOptions>().bias);
  CHECK(c.parallel.mesh == std::vector<std::pair<std::string, int64_t>>{{"dp", -1}});
  CHECK(c.parallel.plan.empty());
  CHECK(c.train.steps == 1000);
  CHECK(c.train.lr == 3e-4);
  CHECK(c.train.min_lr == 3e-5);
  CHECK(c.train.betas == std::vector<double>{0.9, 0.95});
  CHECK(c.train.weight_decay == 0.1);
  CHECK(c.train.grad_clip == 1.0);
  CHECK(c.train.decay == vescale::optim::Decay::Cosine);
  CHECK(c.train.dtype == DType::Fp32);
  CHECK_FALSE(c.train.activation_checkpointing);
  CHECK(c.data.train.empty());
  CHECK(c.log.level == "info");
  // A section names only what it changes.
  c = Config::from_json(
      R"({"model": {"type": "llama", "dim": 256, "n_heads": 8, "n_kv_heads": 2}, "train": {"seq_len": 64}})");
  CHECK(c.model.as<vescale::models::LlamaOptions>().dim == 256);
  CHECK(c.model.as<vescale::models::LlamaOptions>().n_layers == 32);
  CHECK(c.model.as<vescale::models::LlamaOptions>().ffn_dim == 14336);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_theta == 500000.0);
  CHECK(c.train.seq_len == 64);
  CHECK(c.train.batch_size == 8);
}

TEST_CASE("config errors name the file, the full key path and the fix", "[config]") {
  CHECK_THAT(error_of(R"({"train": {"stpes": 10}})"),
             Contains("config 't.json': train.stpes: unknown key; did you mean train.steps?"));
  CHECK_THAT(error_of(R"({"trian": {}})"),
             Contains("config 't.json': trian: unknown key; did you mean train?"));
  CHECK_THAT(
      error_of(R"({"model": {"type": "llama", "rope_scaling": {"factr": 8}}})"),
      Contains("model.rope_scaling.factr: unknown key; did you mean model.rope_scaling.factor?"));
  CHECK_THAT(error_of(R"({"model": {"type": "gpt", "n_kv_heads": 2}})"),
             Contains("model.n_kv_heads: unknown key for model.type 'gpt'"));
  CHECK_THAT(
      error_of(R"({"log": {"zzzzzzzzzz": 1}})"),
      Contains("log.zzzzzzzzzz: unknown key; known keys: metrics_jsonl, tensorboard, level"));
  CHECK_THAT(error_of(R"({"train": {"steps": "10"}})"),
             Contains("config 't.json': train.steps: expected an integer, not a string (\"10\")"));
  CHECK_THAT(error_of(R"({"train": {"steps": 1.5}})"),
             Contains("train.steps: expected an integer, not a number (1.5)"));
  CHECK_THAT(error_of(R"({"train": {"lr": "fast"}})"),
             Contains("train.lr: expected a number, not a string"));
  CHECK_THAT(
      error_of(R"({"train": {"activation_checkpointing": 1}})"),
      Contains("train.activation_checkpointing: expected true or false, not an integer (1)"));
  CHECK_THAT(error_of(R"({"train": {"seed": -1}})"),
             Contains("train.seed: expected a non-negative integer, not -1"));
  CHECK_THAT(error_of(R"({"train": {"betas": [0.9, "x"]}})"),
             Contains("train.betas: expected an array of numbers"));
  CHECK_THAT(
      error_of(R"({"train": 5})"),
      Contains("config 't.json': train: expected an object (a section), not an integer (5)"));
  CHECK_THAT(error_of(R"({"parallel": {"mesh": {"dp": "2"}}})"),
             Contains("parallel.mesh.dp: expected an integer (a mesh dim size, or -1 to infer it), "
                      "not a string"));
  CHECK_THAT(error_of(R"({"data": {"train": [1]}})"),
             Contains("data.train: expected a string or an array of strings"));
  CHECK_THAT(error_of(R"({"model": {"type": "bert"}})"),
             Contains("config 't.json': model.type: 'bert' is not one of gpt, llama, mixtral"));
  CHECK_THAT(error_of("{\"train\": "), Contains("config 't.json': not valid JSON"));
  CHECK_THAT(error_of("[1, 2]"), Contains("the top level must be an object"));
  // Values that parse but make no sense.
  CHECK_THAT(error_of(R"({"train": {"dtype": "fp16"}})"),
             Contains("train.dtype: 'fp16' is not one of fp32, bf16"));
  CHECK_THAT(error_of(R"({"train": {"decay": "step"}})"),
             Contains("train.decay: 'step' is not one of cosine, linear, constant"));
  CHECK_THAT(error_of(R"({"train": {"steps": 0}})"), Contains("train.steps: must be >= 1, got 0"));
  CHECK_THAT(error_of(R"({"checkpoint": {"in_memory_every": 2}})"),
             Contains("checkpoint.in_memory_every: needs checkpoint.dir"));
  CHECK_THAT(error_of(R"({"checkpoint": {"dir": "ck", "in_memory_every": -1}})"),
             Contains("checkpoint.in_memory_every: must be >= 0 (0: no copies in memory)"));
  CHECK_THAT(error_of(R"({"train": {"lr": 1e-4, "min_lr": 1e-3}})"),
             Contains("train.min_lr: must be in [0, train.lr]"));
  CHECK_THAT(error_of(R"({"train": {"betas": [0.9]}})"),
             Contains("train.betas: must be two numbers in [0, 1)"));
  CHECK_THAT(error_of(R"({"train": {"seq_len": 2048}})"),
             Contains("train.seq_len: 2048 exceeds the model's maximum sequence length 1024"));
  CHECK_THAT(error_of(R"({"model": {"n_embd": 100, "n_head": 12}})"),
             Contains("model.n_embd: 100 must be divisible by n_head (12)"));
  CHECK_THAT(error_of(R"({"model": {"type": "llama", "n_heads": 32, "n_kv_heads": 5}})"),
             Contains("model.n_kv_heads: n_heads (32) must be a multiple of n_kv_heads (5)"));
  CHECK_THAT(error_of(R"({"model": {"type": "mixtral", "top_k": 9}})"),
             Contains("model.top_k: must be in [1, n_experts = 8], got 9"));
  CHECK_THAT(error_of(R"({"parallel": {"mesh": {"dp": -1, "tp": -1}}})"),
             Contains("parallel.mesh: at most one dim may be -1"));
  CHECK_THAT(error_of(R"({"parallel": {"mesh": {"dp": 0}}})"),
             Contains("parallel.mesh.dp: must be >= 1, or -1"));
  CHECK_THAT(error_of(R"({"parallel": {"zero": 4}})"),
             Contains("parallel.zero: must be 0, 1, 2 or 3"));
  CHECK_THAT(error_of(R"({"parallel": {"plan": "no/such/plan.json"}})"),
             Contains("parallel.plan: no file 'no/such/plan.json'"));
  CHECK_THAT(error_of(R"({"log": {"level": "loud"}})"),
             Contains("log.level: 'loud' is not one of trace"));
  CHECK_THAT(
      [] {
        try {
          Config::from_file("/no/such/config.json");
        } catch (const vescale::Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      Contains("config: cannot open '/no/such/config.json'; pass an existing file to --config"));
}

TEST_CASE("an override into a section another override made a string is our error", "[config]") {
  // Found by fuzz.config: nlohmann's type_error escaped from operator[] on a string.
  CHECK_THROWS_WITH(
      Config::from_json("{}", "t.json", {"parallel=x", "parallel.mesh.dp=2"}),
      Contains("--set parallel.mesh.dp: config 't.json' has a string at 'parallel', not a "
               "section"));
}

TEST_CASE("overrides (--set) reach any field, with the same checks", "[config]") {
  const std::string text = R"({"parallel": {"mesh": {"dp": 2, "tp": 2}}, "train": {"steps": 100}})";
  auto c = Config::from_json(
      text, "t.json",
      {"train.steps=200", "train.lr=0.01", "train.dtype=bf16", "train.betas=[0.8,0.9]",
       "parallel.mesh.tp=1", "model.n_layer=2", "data.train=a.bin", "log.level=\"debug\""});
  CHECK(c.train.steps == 200);
  CHECK(c.train.lr == 0.01);
  CHECK(c.train.dtype == DType::Bf16);
  CHECK(c.train.betas == std::vector<double>{0.8, 0.9});
  CHECK(c.parallel.mesh == std::vector<std::pair<std::string, int64_t>>{{"dp", 2}, {"tp", 1}});
  CHECK(c.model.as<vescale::models::GPTOptions>().n_layer ==
        2);  // absent from the file: the schema still knows it
  CHECK(c.data.train == std::vector<std::string>{"a.bin"});
  CHECK(c.log.level == "debug");
  c = Config::from_json(R"({"data": {"train": ["x.bin", "y.bin"]}})", "t.json",
                        {"data.train=z_*.bin"});
  CHECK(c.data.train == std::vector<std::string>{"z_*.bin"});  // one pattern replaces the list
  c = Config::from_json(text, "t.json", {"parallel.mesh={\"dp\":1,\"pp\":4}"});
  CHECK(c.parallel.mesh == std::vector<std::pair<std::string, int64_t>>{{"dp", 1}, {"pp", 4}});

  CHECK_THAT(error_of(text, {"train.steps=two"}),
             Contains("--set train.steps: the config has a number there, not a string ('two')"));
  CHECK_THAT(error_of("{}", {"train.steps=two"}),
             Contains("train.steps: expected an integer, not a string (\"two\")"));
  CHECK_THAT(error_of(text, {"train.stpes=3"}),
             Contains("train.stpes: unknown key; did you mean train.steps?"));
  CHECK_THAT(error_of(text, {"parallel.mesh.pp=2"}),
             Contains("has no key 'parallel.mesh.pp'; mesh dims are ordered"));
  CHECK_THAT(error_of(text, {"train.steps"}), Contains("--set 'train.steps': expected key=value"));
  CHECK_THAT(error_of(text, {"train.steps.x=1"}),
             Contains("--set train.steps.x: config 't.json' has an integer at 'train.steps'"));
}

TEST_CASE("to_json prints every field and reads back equal", "[config]") {
  auto c = Config::from_json(
      R"({"model": {"type": "llama", "dim": 256, "n_heads": 8}, "train": {"steps": 7}})");
  auto again = Config::from_json(c.to_json());
  CHECK(again.to_json() == c.to_json());
  CHECK(again.model.as<vescale::models::LlamaOptions>().dim == 256);
  CHECK(again.train.steps == 7);
  CHECK_THAT(c.to_json(), Contains("\"rope_scaling\""));
  CHECK_THAT(c.to_json(), Contains("\"metrics_jsonl\""));
}

TEST_CASE("every shipped config parses", "[config]") {
  namespace fs = std::filesystem;
  int n = 0;
  for (auto& e : fs::directory_iterator(VESCALE_SOURCE_DIR "/configs")) {
    if (e.path().extension() != ".json") continue;
    INFO(e.path());
    CHECK_NOTHROW(Config::from_file(e.path().string()));
    ++n;
  }
  CHECK(n >= 7);
  auto c = Config::from_file(VESCALE_SOURCE_DIR "/configs/llama3_70b.json");
  CHECK(c.model.type == "llama");
  CHECK(c.model.as<vescale::models::LlamaOptions>().dim == 8192);
  CHECK(c.model.as<vescale::models::LlamaOptions>().n_layers == 80);
  CHECK(c.model.as<vescale::models::LlamaOptions>().n_heads == 64);
  CHECK(c.model.as<vescale::models::LlamaOptions>().n_kv_heads == 8);
  CHECK(c.model.as<vescale::models::LlamaOptions>().ffn_dim == 28672);
  CHECK(c.model.as<vescale::models::LlamaOptions>().vocab_size == 128256);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_theta == 500000.0);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_scaling.factor == 8.0);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_scaling.low_freq_factor == 1.0);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_scaling.high_freq_factor == 4.0);
  CHECK(c.model.as<vescale::models::LlamaOptions>().rope_scaling.original_max_position_embeddings == 8192);
}

// Found by fuzz/config_fuzzer: an override is raw command-line bytes, and a non-UTF-8 key or
// value made the next dump of the config throw nlohmann's type_error (not a vescale::Error).
TEST_CASE("an override (--set) with bytes that are not UTF-8 is a clear error", "[config]") {
  CHECK_THAT(error_of("{}", {"model.type.t\xea=x"}), Contains("not valid UTF-8"));
  CHECK_THAT(error_of("{}", {"log.metrics_jsonl=m\xff.jsonl"}),
             Contains("--set 'log.metrics_jsonl=m"));
  CHECK_THAT(error_of("{}", {"log.metrics_jsonl=m\xff.jsonl"}), Contains("not valid UTF-8"));
  // UTF-8 text is fine, and survives the round trip.
  auto c = Config::from_json("{}", "t.json", {"log.metrics_jsonl=m\xc3\xa9tricas.jsonl"});
  CHECK(c.log.metrics_jsonl == "m\xc3\xa9tricas.jsonl");
  CHECK(Config::from_json(c.to_json()).to_json() == c.to_json());
}

TEST_CASE("a copied config keeps model.init_from and from_hf_config", "[config]") {
  vescale::train::Config c;
  c.model.init_from = "hf/llama";
  c.model.from_hf_config = true;
  const vescale::train::Config copy = c;
  CHECK(copy.model.init_from == "hf/llama");
  CHECK(copy.model.from_hf_config);
  vescale::train::Config assigned;
  assigned = c;
  CHECK(assigned.model.init_from == "hf/llama");
  CHECK(assigned.model.from_hf_config);
}

TEST_CASE(
    "train.peak_flops is \"auto\" by default or a number, and GPUs' dense peaks come from "
    "the datasheet table",
    "[config]") {
  auto c = Config::from_json("{}");
  CHECK(c.train.peak_flops.is_auto);
  CHECK(Config::from_json(c.to_json()).train.peak_flops.is_auto);  // written back as "auto"
  c = Config::from_json(R"({"train": {"peak_flops": 5e12}})");
  CHECK_FALSE(c.train.peak_flops.is_auto);
  CHECK(c.train.peak_flops.value == 5e12);
  CHECK_THROWS_WITH(Config::from_json(R"({"train": {"peak_flops": "fast"}})"),
                    Catch::Contains("train.peak_flops: expected a number or \"auto\""));
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", DType::Bf16) == 989e12);
  CHECK(gpu_peak_flops("NVIDIA H100 PCIe", DType::Bf16) == 756e12);
  CHECK(gpu_peak_flops("NVIDIA H100 NVL", DType::Bf16) == 835e12);
  CHECK(gpu_peak_flops("NVIDIA H200", DType::Bf16) == 989e12);
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", DType::Bf16) == 312e12);
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", DType::Fp32) == 19.5e12);
  CHECK(gpu_peak_flops("NVIDIA B200", DType::Bf16) == 2250e12);
  CHECK(gpu_peak_flops("NVIDIA L40S", DType::Bf16) == 362e12);
  CHECK_FALSE(gpu_peak_flops("NVIDIA GeForce GTX 1080", DType::Bf16));
  CHECK_FALSE(gpu_peak_flops("NVIDIA B200", DType::Fp32));  // not in the datasheet: no guess
  // A number is used as given; 0 leaves MFU out.
  c = Config::from_json(R"({"train": {"peak_flops": 0}})");
  CHECK(resolve_peak_flops(c.train, "cpu").flops == 0);
  c = Config::from_json(R"({"train": {"peak_flops": 7e9}})");
  CHECK(resolve_peak_flops(c.train, "cpu").flops == 7e9);
  // auto on a CPU: a measured GEMM, labelled so; at least 1 GFLOP/s on anything we run on.
  const auto measured = resolve_peak_flops(Config::from_json("{}").train, "cpu");
  CHECK(measured.flops > 1e9);
  CHECK(measured.label == "vs measured GEMM peak");
}
