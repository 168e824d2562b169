// The model registry (models/registry.h, models/model.h): every family registers its options and
// its spec from its own folder, and what each registers is usable as it is.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>

#include "vescale/models/gpt/gpt_options.h"
#include "vescale/models/llama/llama_options.h"
#include "vescale/models/mixtral/mixtral_options.h"
#include "vescale/models/model.h"
#include "vescale/models/registry.h"
#include "vescale/common/json_schema.h"
#include "vescale/plan/plan.h"

using Catch::Matchers::Contains;

TEST_CASE("the registry holds gpt, llama, mixtral, qwen3 and qwen3_moe, options and specs alike",
          "[registry]") {
  CHECK(vescale::models::family_types() ==
        std::vector<std::string>{"gpt", "llama", "mixtral", "qwen3", "qwen3_moe"});
  for (const auto& type : vescale::models::family_types()) {
    INFO(type);
    auto o = vescale::models::default_options(type);
    CHECK(o->type() == type);
    CHECK(vescale::models::spec(type).type == type);
  }
  CHECK(vescale::models::find_family("bert") == nullptr);
  CHECK(vescale::models::unknown_type_message("lama") ==
        "'lama' is not one of gpt, llama, mixtral, qwen3, qwen3_moe; did you mean llama?");
  CHECK(vescale::models::unknown_type_message("qwen") ==
        "'qwen' is not one of gpt, llama, mixtral, qwen3, qwen3_moe; did you mean qwen3?");
  CHECK_THROWS_WITH(vescale::models::spec("bert"),
                    Contains("'bert' is not one of gpt, llama, mixtral, qwen3, qwen3_moe"));
}

TEST_CASE("a family's options survive the JSON writer and reader, and validate their values",
          "[registry]") {
  auto o = vescale::models::default_options("llama");
  o->as<vescale::models::LlamaOptions>().dim = 96;
  o->as<vescale::models::LlamaOptions>().rope_scaling.factor = 8;
  vescale::json_schema::Writer w;
  o->write(w);
  CHECK(w.node["dim"] == 96);
  CHECK(w.node["rope_scaling"]["factor"] == 8.0);
  auto back = vescale::models::default_options("llama");
  vescale::json_schema::Reader r(w.node, "model", "<test>");
  back->read(r);
  r.finish();
  CHECK(back->as<vescale::models::LlamaOptions>().dim == 96);
  CHECK(back->as<vescale::models::LlamaOptions>().rope_scaling.factor == 8.0);
  // A copy is a deep copy.
  auto copy = back->clone();
  copy->as<vescale::models::LlamaOptions>().dim = 32;
  CHECK(back->as<vescale::models::LlamaOptions>().dim == 96);
  // Values: the first bad field is named.
  std::vector<std::string> failed;
  back->as<vescale::models::LlamaOptions>().dim = 128;  // 4 per head
  back->as<vescale::models::LlamaOptions>().n_kv_heads = 5;
  back->validate(
      [&](const std::string& f, const std::string& m) { failed.push_back(f + ": " + m); });
  REQUIRE(!failed.empty());
  CHECK(failed[0] == "n_kv_heads: n_heads (32) must be a multiple of n_kv_heads (5)");
  // The wrong struct is an error naming the type.
  CHECK_THROWS_WITH(back->as<vescale::models::GPTOptions>(), Contains("model.type 'llama' does not have"));
}

TEST_CASE("each spec's shipped plans exist and parse", "[registry]") {
  for (const auto& type : vescale::models::family_types()) {
    const auto& b = vescale::models::spec(type);
    CHECK(!b.plans.empty());
    for (const auto& [name, file] : b.plans) {
      INFO(type << " " << name << " " << file);
      const std::string path = std::string(VESCALE_SOURCE_DIR) + "/" + file;
      REQUIRE(std::filesystem::exists(path));
      CHECK_NOTHROW(vescale::plan::Plan::from_json_file(path));
    }
  }
}

TEST_CASE("a spec builds the model its options describe", "[registry]") {
  auto o = vescale::models::default_options("gpt");
  auto& g = o->as<vescale::models::GPTOptions>();
  g.vocab_size = 32, g.n_positions = 8, g.n_embd = 16, g.n_layer = 2, g.n_head = 2;
  vescale::models::Model m = vescale::models::spec("gpt").build(*o);
  CHECK(m.block_pattern == "h.*");
  CHECK(m.module->named_parameters()["wte.weight"].sizes() == at::IntArrayRef{32, 16});
  at::Tensor logits = m.forward(at::zeros({1, 8}, at::kLong));
  CHECK(logits.sizes() == at::IntArrayRef{1, 8, 32});
  // FLOPs: positions are looked up, the tied wte multiplies.
  CHECK(vescale::models::spec("gpt").matmul_fraction(*o, "wpe.weight", {8, 16}) == 0.0);
  CHECK(vescale::models::spec("gpt").matmul_fraction(*o, "wte.weight", {32, 16}) == 1.0);
  // The Hugging Face adapter both ways, through the registry.
  const auto sd = [&] {
    vescale::models::StateDict d;
    for (const auto& p : m.module->named_parameters()) d[p.key()] = p.value().detach();
    return d;
  }();
  const auto& b = vescale::models::spec("gpt");
  const auto back = b.from_hf(b.to_hf(sd, *o), *o);
  CHECK(back.size() == sd.size());
  CHECK(at::equal(back.at("h.1.attn.c_attn.weight"), sd.at("h.1.attn.c_attn.weight")));
  auto x = vescale::models::default_options("mixtral");
  CHECK(vescale::models::spec("mixtral").matmul_fraction(*x, "layers.0.feed_forward.experts.w1",
                                                   {8, 14336, 4096}) == 2.0 / 8.0);
}
