// The model registry (models/registry.h, models/model.h): every family registers its options and
// its builder from its own folder, and what each registers is usable as it is.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <filesystem>

#include "gpt/gpt_options.h"
#include "llama/llama_options.h"
#include "mixtral/mixtral_options.h"
#include "model.h"
#include "registry.h"
#include "vescale/common/json_schema.h"
#include "vescale/plan/plan.h"

using Catch::Matchers::Contains;

TEST_CASE("the registry holds gpt, llama and mixtral, options and builders alike", "[registry]") {
  CHECK(models::family_types() == std::vector<std::string>{"gpt", "llama", "mixtral"});
  for (const auto& type : models::family_types()) {
    INFO(type);
    auto o = models::default_options(type);
    CHECK(o->type() == type);
    CHECK(models::builder(type).type == type);
  }
  CHECK(models::find_family("bert") == nullptr);
  CHECK(models::unknown_type_message("lama") ==
        "'lama' is not one of gpt, llama, mixtral; did you mean llama?");
  CHECK_THROWS_WITH(models::builder("bert"), Contains("'bert' is not one of gpt, llama, mixtral"));
}

TEST_CASE("a family's options survive the JSON writer and reader, and validate their values",
          "[registry]") {
  auto o = models::default_options("llama");
  o->as<models::LlamaOptions>().dim = 96;
  o->as<models::LlamaOptions>().rope_scaling.factor = 8;
  vescale::json_schema::Writer w;
  o->write(w);
  CHECK(w.node["dim"] == 96);
  CHECK(w.node["rope_scaling"]["factor"] == 8.0);
  auto back = models::default_options("llama");
  vescale::json_schema::Reader r(w.node, "model", "<test>");
  back->read(r);
  r.finish();
  CHECK(back->as<models::LlamaOptions>().dim == 96);
  CHECK(back->as<models::LlamaOptions>().rope_scaling.factor == 8.0);
  // A copy is a deep copy.
  auto copy = back->clone();
  copy->as<models::LlamaOptions>().dim = 32;
  CHECK(back->as<models::LlamaOptions>().dim == 96);
  // Values: the first bad field is named.
  std::vector<std::string> failed;
  back->as<models::LlamaOptions>().dim = 128;  // 4 per head
  back->as<models::LlamaOptions>().n_kv_heads = 5;
  back->validate(
      [&](const std::string& f, const std::string& m) { failed.push_back(f + ": " + m); });
  REQUIRE(!failed.empty());
  CHECK(failed[0] == "n_kv_heads: n_heads (32) must be a multiple of n_kv_heads (5)");
  // The wrong struct is an error naming the type.
  CHECK_THROWS_WITH(back->as<models::GPTOptions>(), Contains("model.type 'llama' does not have"));
}

TEST_CASE("each builder's shipped plans exist and parse", "[registry]") {
  for (const auto& type : models::family_types()) {
    const auto& b = models::builder(type);
    CHECK(!b.plans.empty());
    for (const auto& [name, file] : b.plans) {
      INFO(type << " " << name << " " << file);
      const std::string path = std::string(VESCALE_SOURCE_DIR) + "/" + file;
      REQUIRE(std::filesystem::exists(path));
      CHECK_NOTHROW(vescale::plan::Plan::from_json_file(path));
    }
  }
}

TEST_CASE("a builder builds the model its options describe", "[registry]") {
  auto o = models::default_options("gpt");
  auto& g = o->as<models::GPTOptions>();
  g.vocab_size = 32, g.n_positions = 8, g.n_embd = 16, g.n_layer = 2, g.n_head = 2;
  models::Model m = models::builder("gpt").build(*o);
  CHECK(m.block_pattern == "h.*");
  CHECK(m.module->named_parameters()["wte.weight"].sizes() == at::IntArrayRef{32, 16});
  at::Tensor logits = m.forward(at::zeros({1, 8}, at::kLong));
  CHECK(logits.sizes() == at::IntArrayRef{1, 8, 32});
  // FLOPs: positions are looked up, the tied wte multiplies.
  CHECK(models::builder("gpt").matmul_fraction(*o, "wpe.weight", {8, 16}) == 0.0);
  CHECK(models::builder("gpt").matmul_fraction(*o, "wte.weight", {32, 16}) == 1.0);
  // The Hugging Face adapter both ways, through the registry.
  const auto sd = [&] {
    models::StateDict d;
    for (const auto& p : m.module->named_parameters()) d[p.key()] = p.value().detach();
    return d;
  }();
  const auto& b = models::builder("gpt");
  const auto back = b.from_hf(b.to_hf(sd, *o), *o);
  CHECK(back.size() == sd.size());
  CHECK(at::equal(back.at("h.1.attn.c_attn.weight"), sd.at("h.1.attn.c_attn.weight")));
  auto x = models::default_options("mixtral");
  CHECK(models::builder("mixtral").matmul_fraction(*x, "layers.0.feed_forward.experts.w1",
                                                   {8, 14336, 4096}) == 2.0 / 8.0);
}
