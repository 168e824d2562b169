// Cross-check against Hugging Face transformers: tests/models/hf_reference.py (a ctest fixture)
// saved tiny random LlamaForCausalLM (GQA, llama3 rope scaling), MixtralForCausalLM and
// GPT2LMHeadModel with their logits and loss on fixed tokens. Our models load those weights
// through our safetensors reader and the HF name mappings, and must match to 1e-5 relative (fp32).
// Also: our reader against torch-written files of every dtype, and a file for the python side
// to read back (the ctest models.hf_reads_ours).
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "vescale/models/gpt/gpt.h"
#include "vescale/models/shared/hugging_face.h"
#include "vescale/models/llama/llama.h"
#include "vescale/models/mixtral/mixtral.h"
#include "vescale/checkpoint/safetensors.h"
#include "common/hf_reference_diff.h"

using json = nlohmann::json;
namespace ckpt = vescale::checkpoint;
using vescale::test::hf_reference_diffs;
using vescale::test::print_hf_diffs;

namespace {
const std::string kDir = HF_REFERENCE_DIR;  // set by tests/CMakeLists.txt

json read_config(const std::string& model) {
  std::ifstream in(kDir + "/" + model + "/config.json");
  REQUIRE(in);
  return json::parse(in);
}

// transformers 5 keeps rope settings in rope_parameters; 4.x used rope_theta / rope_scaling.
void rope_from_config(const json& c, double& theta, vescale::models::RopeScaling& s) {
  const json& r = c.contains("rope_parameters") && c["rope_parameters"].is_object()
                      ? c["rope_parameters"]
                  : c.contains("rope_scaling") && c["rope_scaling"].is_object() ? c["rope_scaling"]
                                                                                : json::object();
  theta = r.value("rope_theta", c.value("rope_theta", 10000.0));
  if (r.value("rope_type", r.value("type", std::string("default"))) == "llama3") {
    s = {r.at("factor").get<double>(), r.at("low_freq_factor").get<double>(),
         r.at("high_freq_factor").get<double>(),
         r.at("original_max_position_embeddings").get<int64_t>()};
  }
}

}  // namespace

TEST_CASE("LLaMA with HF weights matches LlamaForCausalLM's logits and loss to 1e-5",
          "[models][hf]") {
  auto c = read_config("llama");
  vescale::models::LlamaOptions o{.vocab_size = c["vocab_size"],
                         .dim = c["hidden_size"],
                         .n_layers = c["num_hidden_layers"],
                         .n_heads = c["num_attention_heads"],
                         .n_kv_heads = c["num_key_value_heads"],
                         .ffn_dim = c["intermediate_size"],
                         .norm_eps = c["rms_norm_eps"],
                         .max_seq_len = c["max_position_embeddings"],
                         .tie_embeddings = c["tie_word_embeddings"]};
  rope_from_config(c, o.rope_theta, o.rope_scaling);
  REQUIRE(o.n_kv_heads < o.n_heads);   // GQA is exercised
  REQUIRE(o.rope_scaling.factor > 0);  // and the llama3 scaling
  vescale::models::Llama model(o);
  vescale::models::load_state_dict(
      *model, vescale::models::llama_from_hf(ckpt::load_safetensors(kDir + "/llama/model.safetensors"), o));
  model->eval();
  auto ref = ckpt::load_safetensors(kDir + "/llama/reference.safetensors");
  at::NoGradGuard ng;
  auto logits = model->forward(ref.at("tokens"));
  auto d = hf_reference_diffs(logits, ref);
  print_hf_diffs("llama", d, ref);
  CHECK(d.logits <= 1e-5);
  CHECK(d.loss <= 1e-5);
}

TEST_CASE("Mixtral with HF weights matches MixtralForCausalLM's logits, loss and aux loss to 1e-5",
          "[models][hf]") {
  auto c = read_config("mixtral");
  vescale::models::MixtralOptions o{
      .llama = {.vocab_size = c["vocab_size"],
                .dim = c["hidden_size"],
                .n_layers = c["num_hidden_layers"],
                .n_heads = c["num_attention_heads"],
                .n_kv_heads = c["num_key_value_heads"],
                .ffn_dim = c["intermediate_size"],
                .norm_eps = c["rms_norm_eps"],
                .max_seq_len = c["max_position_embeddings"],
                .tie_embeddings = c["tie_word_embeddings"]},
      .moe = {.n_experts = c["num_local_experts"], .top_k = c["num_experts_per_tok"]}};
  rope_from_config(c, o.llama.rope_theta, o.llama.rope_scaling);
  vescale::models::Mixtral model(o);
  vescale::models::load_state_dict(
      *model,
      vescale::models::mixtral_from_hf(ckpt::load_safetensors(kDir + "/mixtral/model.safetensors"), o));
  model->eval();
  auto ref = ckpt::load_safetensors(kDir + "/mixtral/reference.safetensors");
  auto logits = model->forward(ref.at("tokens"));
  auto d = hf_reference_diffs(logits.detach(), ref);
  const double aux_diff = (model->aux_loss() - ref.at("aux_loss")).abs().item<double>();
  print_hf_diffs("mixtral", d, ref);
  std::cout << "hf cross-check mixtral: |aux loss diff| = " << aux_diff << " (aux loss "
            << ref.at("aux_loss").item<double>() << ")\n";
  CHECK(d.logits <= 1e-5);
  CHECK(d.loss <= 1e-5);
  CHECK(aux_diff <= 1e-5);
}

TEST_CASE("GPT-2 with HF weights matches GPT2LMHeadModel's logits and loss to 1e-5",
          "[models][hf]") {
  auto c = read_config("gpt2");
  vescale::models::GPTOptions o{.vocab_size = c["vocab_size"],
                       .n_positions = c["n_positions"],
                       .n_embd = c["n_embd"],
                       .n_layer = c["n_layer"],
                       .n_head = c["n_head"],
                       .dropout = 0.0,
                       .layer_norm_eps = c["layer_norm_epsilon"]};
  vescale::models::GPT model(o);
  vescale::models::load_state_dict(
      *model, vescale::models::gpt2_from_hf(ckpt::load_safetensors(kDir + "/gpt2/model.safetensors"), o));
  model->eval();
  auto ref = ckpt::load_safetensors(kDir + "/gpt2/reference.safetensors");
  {
    // With grad on, the training path (vescale::kernels::gelu_tanh keeps its tanh for backward).
    auto d = hf_reference_diffs(model->forward(ref.at("tokens")), ref);
    CHECK(d.logits <= 1e-5);
    CHECK(d.loss <= 1e-5);
  }
  at::NoGradGuard ng;
  auto d = hf_reference_diffs(model->forward(ref.at("tokens")), ref);
  print_hf_diffs("gpt2", d, ref);
  CHECK(d.logits <= 1e-5);
  CHECK(d.loss <= 1e-5);
}

TEST_CASE("HF import names what does not fit", "[models][hf]") {
  auto c = read_config("llama");
  auto hf = ckpt::load_safetensors(kDir + "/llama/model.safetensors");
  vescale::models::LlamaOptions o{.vocab_size = c["vocab_size"],
                         .dim = c["hidden_size"],
                         .n_layers = 1,
                         .n_heads = c["num_attention_heads"],
                         .n_kv_heads = c["num_key_value_heads"],
                         .ffn_dim = c["intermediate_size"]};
  // One layer fewer than the file: layer 1's keys are unexpected.
  CHECK_THROWS_WITH(vescale::models::llama_from_hf(hf, o),
                    Catch::Matchers::Contains("unexpected: layers.1."));
  o.n_layers = 2;
  hf.erase("model.layers.0.mlp.up_proj.weight");
  CHECK_THROWS_WITH(vescale::models::llama_from_hf(hf, o),
                    Catch::Matchers::Contains("missing: layers.0.mlp.up_proj.weight"));
  // A tied model refuses a head that differs from the embedding.
  o.tie_embeddings = true;
  hf = ckpt::load_safetensors(kDir + "/llama/model.safetensors");
  CHECK_THROWS_WITH(vescale::models::llama_from_hf(hf, o),
                    Catch::Matchers::Contains("lm_head.weight differs"));
}

// The formulas of hf_reference.py's dtype_tensors(), computed here independently.
std::map<std::string, at::Tensor> expected_dtypes() {
  auto ramp = [](int64_t n) { return at::arange(n, at::kDouble) * 0.25 - 0.5; };
  return {{"F64", ramp(6).reshape({2, 3})},
          {"F32", ramp(6).to(at::kFloat).reshape({3, 2})},
          {"F16", ramp(4).to(at::kHalf)},
          {"BF16", ramp(4).to(at::kBFloat16).reshape({2, 2})},
          {"I64", (at::arange(5, at::kLong) - 2) * int64_t{1000000000000}},
          {"I32", (at::arange(5, at::kInt) - 2) * 100000},
          {"I16", (at::arange(5, at::kShort) - 2) * 1000},
          {"I8", at::arange(5, at::kChar) - 2},
          {"U8", at::arange(5, at::kByte) * 50},
          {"BOOL", at::tensor(std::vector<int64_t>{1, 0, 1}).to(at::kBool)},
          {"scalar", at::scalar_tensor(3.5, at::kFloat)},
          {"empty", at::zeros({0, 4}, at::kFloat)}};
}

TEST_CASE(
    "safetensors: files written by the python library read back exactly, and ours are written for "
    "it",
    "[models][hf]") {
  auto got = ckpt::load_safetensors(kDir + "/dtypes.safetensors");
  auto want = expected_dtypes();
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.count(name));
    CHECK(got.at(name).scalar_type() == t.scalar_type());
    CHECK(got.at(name).sizes() == t.sizes());
    CHECK(got.at(name).equal(t));
  }
  // Non-contiguous input is written as its values. models.hf_reads_ours checks this file in python.
  want["F64"] = want["F64"].t().contiguous().t();
  ckpt::save_safetensors(kDir + "/cpp_written.safetensors", want, {{"format", "pt"}});
}
