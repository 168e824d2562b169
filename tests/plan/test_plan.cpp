// Plans: FQN matching, first match wins, and every way a plan can be wrong gives an error
// that names what is wrong.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "vescale/common/check.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/parallel_dims.h"
#include "vescale/plan/plan.h"

using namespace vescale::plan;
using namespace vescale::dtensor;
using Catch::Matchers::Contains;

namespace {
const char* kLlamaPlan = R"J({
  "mesh": ["dp", "tp"],
  "params": {
    "tok_embeddings.weight": ["Replicate", "Shard(0)"],
    "layers.*.attention.w[qkv].weight": ["Replicate", "Shard(0)"],
    "layers.*.attention.wo.weight": ["Replicate", "Shard(1)"],
    "re:layers\\.[0-9]+\\.feed_forward\\.w[13]\\.weight": ["Replicate", "Shard(0)"],
    "layers.*.feed_forward.w2.weight": ["Replicate", "Shard(-1)"],
    "*": ["Replicate", "Replicate"]
  },
  "forward": {
    "layers.*.attention_norm": {"input": [["Shard(0)", "Shard(1)"]], "output": [["Shard(0)", "Replicate"]]}
  },
  "grad_reduce": {"dims": ["dp"], "bucket_mb": 25, "fused": true},
  "zero": 1
})J";
}  // namespace

TEST_CASE("FQN patterns: globs, classes and regexes", "[plan]") {
  CHECK(fqn_match("layers.*.attention.wq.weight", "layers.12.attention.wq.weight"));
  CHECK(fqn_match("layers.*.attention.w[qkv].weight", "layers.0.attention.wk.weight"));
  CHECK_FALSE(fqn_match("layers.*.attention.w[qkv].weight", "layers.0.attention.wo.weight"));
  CHECK(fqn_match("*", "anything.at.all"));
  CHECK(fqn_match("layers.?.norm", "layers.3.norm"));
  CHECK_FALSE(fqn_match("layers.?.norm", "layers.13.norm"));
  CHECK(fqn_match("w[1-3]", "w2"));
  CHECK_FALSE(fqn_match("w[!1-3]", "w2"));
  CHECK(fqn_match("re:layers\\.[0-9]+\\.mlp", "layers.7.mlp"));
  CHECK_FALSE(fqn_match("re:layers\\.[0-9]+\\.mlp", "layers.x.mlp"));
  CHECK_FALSE(fqn_match("layers.*.norm", "layers.1.norm.weight"));
}

TEST_CASE("a plan from JSON: first match wins, shard dims normalized", "[plan]") {
  auto plan = Plan::from_json(kLlamaPlan, "llama.json");
  CHECK(plan.mesh_dims() == std::vector<std::string>{"dp", "tp"});
  CHECK(plan.zero() == 1);
  CHECK(plan.grad_reduce().dims == std::vector<std::string>{"dp"});
  CHECK(plan.placements_for("layers.3.attention.wv.weight") == Placements{Replicate(), Shard(0)});
  CHECK(plan.placements_for("layers.3.feed_forward.w3.weight") ==
        Placements{Replicate(), Shard(0)});
  CHECK(plan.placements_for("norm.weight") ==
        Placements{Replicate(), Replicate()});  // the '*' default
  auto resolved = plan.resolve({"dp", "tp"}, {{"tok_embeddings.weight", {256, 16}},
                                              {"layers.0.attention.wq.weight", {16, 16}},
                                              {"layers.0.attention.wo.weight", {16, 16}},
                                              {"layers.0.feed_forward.w1.weight", {64, 16}},
                                              {"layers.0.feed_forward.w2.weight", {16, 64}},
                                              {"norm.weight", {16}}});
  CHECK(resolved["layers.0.feed_forward.w2.weight"] ==
        Placements{Replicate(), Shard(1)});  // Shard(-1) -> 1
  auto* f = plan.forward_for("layers.5.attention_norm");
  REQUIRE(f);
  CHECK(f->input.at(0) == Placements{Shard(0), Shard(1)});
  CHECK(plan.forward_for("layers.5.ffn_norm") == nullptr);
}

TEST_CASE("the C++ builder equals the JSON", "[plan]") {
  Plan plan({"dp", "tp"});
  plan.shard("layers.*.attention.w[qkv].weight", {Replicate(), Shard(0)})
      .shard("*", {Replicate(), Replicate()});
  auto json = Plan::from_json(kLlamaPlan);
  for (auto name : {"layers.1.attention.wq.weight", "output.weight"})
    CHECK(plan.placements_for(name) == json.placements_for(name));
}

TEST_CASE("a plan pattern that matches nothing is an error with a guess, unless optional",
          "[plan]") {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> params{
      {"layers.0.attention.wq.weight", {8, 8}},
      {"layers.1.attention.wq.weight", {8, 8}},
      {"norm.weight", {8}}};
  // A typo would leave every attention weight replicated by the '*' default.
  auto typo = Plan::from_json(
      R"J({"mesh": ["tp"], "params": {"layers.*.atention.wq.weight": ["Shard(0)"], "*": ["Replicate"]}})J",
      "t.json");
  CHECK_THROWS_WITH(
      typo.resolve({"tp"}, params),
      Contains(
          "plan 't.json': params['layers.*.atention.wq.weight'] matches no parameter of the model; "
          "did you mean 'layers.*.attention.wq.weight'? Fix the pattern, or list it under "
          "\"optional\""));
  // Listed as optional (a plan shared by models with and without the parameter): fine.
  auto optional = Plan::from_json(
      R"J({"mesh": ["tp"], "params": {"output.weight": ["Shard(0)"], "*": ["Replicate"]},
                                       "optional": ["output.weight"]})J",
      "o.json");
  CHECK(optional.resolve({"tp"}, params).size() == 3);
  Plan built({"tp"});
  built.shard("output.weight", {Shard(0)}).shard("*", {Replicate()});
  CHECK_THROWS_WITH(built.resolve({"tp"}, params),
                    Contains("params['output.weight'] matches no parameter"));
  built.optional("output.weight");
  CHECK(built.resolve({"tp"}, params).size() == 3);
  // Phase patterns too.
  auto phase = Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Replicate"]},
                                    "phase": {"norm.wieght": "before_sharding"}})J",
                               "ph.json");
  CHECK_THROWS_WITH(
      phase.resolve({"tp"}, params),
      Contains(
          "phase['norm.wieght'] matches no parameter of the model; did you mean 'norm.weight'?"));
  // Forward patterns are checked against module names.
  auto fwd = Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Replicate"]},
                                  "forward": {"layers.*.atention": {"input": [["Replicate"]]}}})J",
                             "f.json");
  const std::vector<std::string> modules{"", "layers", "layers.0", "layers.0.attention",
                                         "layers.0.attention.wq"};
  auto good = Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Replicate"]},
                                   "forward": {"layers.*.attention": {"input": [["Replicate"]]}}})J",
                              "g.json");
  CHECK_NOTHROW(good.check_modules(modules));
  CHECK_THROWS_WITH(
      fwd.check_modules(modules),
      Contains("forward['layers.*.atention'] matches no module of the model; did you mean "
               "'layers.*.attention'?"));
  // An unknown top-level key gets a guess too.
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Replicate"]}, "optinal": []})J",
                      "k.json"),
      Contains("plan 'k.json': optinal: unknown key; did you mean optional?"));
  // grad_reduce is read by the config's schema reader: its keys get guesses, its values types.
  CHECK_THROWS_WITH(
      Plan::from_json(
          R"J({"mesh": ["dp"], "params": {"*": ["Replicate"]}, "grad_reduce": {"fusd": true}})J",
          "g.json"),
      Contains("plan 'g.json': grad_reduce.fusd: unknown key; did you mean grad_reduce.fused?"));
  CHECK_THROWS_WITH(
      Plan::from_json(
          R"J({"mesh": ["dp"], "params": {"*": ["Replicate"]}, "grad_reduce": {"fused": "yes"}})J",
          "g.json"),
      Contains("grad_reduce.fused: expected true or false, not a string (\"yes\")"));
  CHECK_THROWS_WITH(
      Plan::from_json(
          R"J({"mesh": ["dp"], "params": {"*": ["Replicate"]}, "grad_reduce": {"bucket_mb": 0}})J",
          "g.json"),
      Contains("grad_reduce.bucket_mb: must be a positive number"));
}

TEST_CASE("plan errors name the pattern, the parameter or the mesh dim", "[plan]") {
  // An unmatched parameter.
  auto plan = Plan::from_json(R"J({"mesh": ["tp"], "params": {"a.*": ["Shard(0)"]}})J", "p.json");
  CHECK_THROWS_WITH(
      plan.resolve({"tp"}, {{"b.weight", {4}}}),
      Contains(
          "plan 'p.json': parameter 'b.weight' matches no pattern; add one, or a '*' default"));
  // A bad placement string.
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Shard(x)"]}})J", "p.json"),
      Contains("params['*'][0]: placement 'Shard(x)': Shard needs an integer dim"));
  // An unknown mesh dim.
  auto pp = Plan::from_json(R"J({"mesh": ["pp"], "params": {"*": ["Replicate"]}})J", "p.json");
  CHECK_THROWS_WITH(pp.resolve({"tp"}, {{"w", {4}}}),
                    Contains("mesh dim 'pp' is not in the mesh [tp]"));
  // A shard dim out of range.
  auto deep = Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Shard(2)"]}})J", "p.json");
  CHECK_THROWS_WITH(
      deep.resolve({"tp"}, {{"w", {4, 4}}}),
      Contains("parameter 'w' has 2 dims (shape [4, 4]) but its pattern shards dim 2"));
  // Wrong counts, types and keys.
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["dp", "tp"], "params": {"*": ["Replicate"]}})J", "p.json"),
      Contains("params['*'] has 1 placements for a mesh of 2 dims"));
  CHECK_THROWS_WITH(Plan::from_json(R"J({"mesh": ["tp"], "params": {}, "zeros": 1})J", "p.json"),
                    Contains("zeros: unknown key; did you mean zero?"));
  CHECK_THROWS_WITH(Plan::from_json(R"J({"mesh": ["tp"], "params": {}, "zero": 5})J", "p.json"),
                    Contains("zero must be 0, 1, 2 or 3"));
  CHECK_THROWS_WITH(Plan::from_json(R"J({"mesh": "tp", "params": {}})J", "p.json"),
                    Contains("mesh must be a non-empty list"));
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {"re:(": ["Replicate"]}})J", "p.json"),
      Contains("is not a valid regex"));
  CHECK_THROWS_WITH(Plan::from_json("{\"mesh\": [", "p.json"),
                    Contains("plan 'p.json': not valid JSON"));
  CHECK_THROWS_WITH(Plan::from_json(R"J({"mesh": ["tp"], "params": {"*": ["Partial"]}})J", "p.json")
                        .resolve({"tp"}, {{"w", {2}}}),
                    Contains("cannot be Partial"));
  CHECK_THROWS_WITH(Plan::from_json_file("/nonexistent/plan.json"),
                    Contains("cannot open '/nonexistent/plan.json'"));
}

TEST_CASE("plan phase: parsed, matched, and bad values named", "[plan]") {
  auto p = vescale::plan::Plan::from_json(R"({"mesh": ["tp"], "params": {"*": ["Replicate"]},
      "phase": {"layers.*.wq.weight": "before_sharding", "*": "after_sharding"}})");
  CHECK(p.phase_for("layers.3.wq.weight") == vescale::plan::InitPhase::BeforeSharding);
  CHECK(p.phase_for("layers.3.wk.weight") == vescale::plan::InitPhase::AfterSharding);
  CHECK(vescale::plan::Plan({"tp"}).phase_for("x") == vescale::plan::InitPhase::AfterSharding);
  CHECK_THROWS_WITH(
      vescale::plan::Plan::from_json(R"({"mesh": ["tp"], "params": {"*": ["Replicate"]},
      "phase": {"w": "later"}})",
                                     "p.json"),
      Catch::Matchers::Contains("phase['w']") && Catch::Matchers::Contains("before_sharding"));
}

// Found by fuzz/plan_fuzzer (docs/BUILD.md, Fuzzing) or written against the same failure modes
// of std::regex: each used to crash, hang, hit undefined behaviour, or throw a non-vescale error.
TEST_CASE("regex patterns that could crash std::regex are refused with a vescale::Error",
          "[plan]") {
  // A back-reference with 20 digits: libstdc++ overflows a long reading it (UB).
  CHECK_THROWS_WITH(fqn_match("re:a\\88888888888888888888", "a"), Contains("back-references"));
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {"re:(a)\\1": ["Replicate"]}})J", "p.json"),
      Contains("plan 'p.json': params['re:(a)\\1']") && Contains("back-references"));
  // A long pattern: std::regex's compiler recurses per term and overflows the stack.
  std::string nested = "re:";
  nested.append(20000, '(').append("a").append(20000, ')');
  CHECK_THROWS_WITH(fqn_match(nested, "a"), Contains("regex patterns are limited to 512"));
  // Counted repeats copy the automaton: (a?){1000} has thousands of states, 1e20 overflows.
  CHECK_THROWS_WITH(fqn_match("re:(a?){1000}", "a"), Contains("repeat counts are too large"));
  CHECK_THROWS_WITH(fqn_match("re:a{99999999999999999999}", "a"),
                    Contains("repeat counts are too large"));
  CHECK_THROWS_WITH(fqn_match("re:(a{64}){64}", "a"), Contains("repeat counts are too large"));
  // A syntax error is a vescale::Error too (it was std::regex_error from fqn_match).
  CHECK_THROWS_AS(fqn_match("re:(", "x"), vescale::Error);
  CHECK_THROWS_AS(fqn_match("re:a{2,1}", "aa"), vescale::Error);
}

TEST_CASE("regex patterns match long names in polynomial time and bounded stack", "[plan]") {
  // Backtracking takes 2^n steps on (a*)*b, and recursed once per character on (a|b)*.
  CHECK_FALSE(fqn_match("re:(a*)*b", std::string(5000, 'a')));
  std::string name(200000, 'a');
  CHECK(fqn_match("re:(a|b)*", name));
  name.push_back('c');  // (not operator+: gcc 12 warns falsely on it, -Warray-bounds)
  CHECK_FALSE(fqn_match("re:(a|b)*", name));
  // What plans really use still works, counted repeats included.
  CHECK(fqn_match("re:layers\\.\\d{1,3}\\.w[qkv]", "layers.12.wq"));
  CHECK_FALSE(fqn_match("re:layers\\.\\d{1,3}\\.w[qkv]", "layers.1234.wq"));
  CHECK(fqn_match("re:a\\\\1", "a\\1"));  // an escaped backslash, then a literal 1
}

TEST_CASE("zero out of int range is refused, not wrapped", "[plan]") {
  // 4294967297 = 2^32 + 1 read as int was 1, a valid ZeRO stage.
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {}, "zero": 4294967297})J", "p.json"),
      Contains("zero must be 0, 1, 2 or 3"));
  CHECK_THROWS_WITH(
      Plan::from_json(R"J({"mesh": ["tp"], "params": {}, "zero": 18446744073709551615})J",
                      "p.json"),
      Contains("zero must be 0, 1, 2 or 3"));
  CHECK(Plan::from_json(R"J({"mesh": ["tp"], "params": {}, "zero": 3})J").zero() == 3);
}

TEST_CASE(
    "parallel dims: the data dims, tensor and pipeline sizes, and a stage's mesh, from mesh and "
    "plan",
    "[plan]") {
  using vescale::plan::ParallelDims;
  const auto plan = Plan::from_json(
      R"({"mesh": ["dp", "ep", "tp"], "pipeline": {"dim": "stage", "microbatches": 4},
          "params": {"*": ["Replicate", "Replicate", "Replicate"]}})",
      "pp.json");
  const ParallelDims d({{"stage", 2}, {"dp", 4}, {"ep", 2}, {"tp", 8}}, &plan);
  CHECK(d.pipeline == "stage");
  CHECK(d.pp() == 2);
  CHECK(d.data == std::vector<std::string>{"dp", "ep"});
  CHECK(d.data_size() == 8);
  CHECK(d.dp() == 4);
  CHECK(d.tp() == 8);
  CHECK(d.size("cp") == 1);  // absent dims count as 1
  CHECK(d.is_data("ep"));
  CHECK_FALSE(d.is_data("tp"));
  CHECK(d.stage_dims() ==
        std::vector<std::pair<std::string, int64_t>>{{"dp", 4}, {"ep", 2}, {"tp", 8}});
  // Without a plan there is no pipeline; the dims come from a mesh shape as well.
  const ParallelDims flat(vescale::mesh::MeshShape({{"tp", 2}, {"dp", -1}}, 8), nullptr);
  CHECK(flat.pipeline.empty());
  CHECK(flat.pp() == 1);
  CHECK(flat.dp() == 4);
  CHECK(flat.data == std::vector<std::string>{"dp"});
  CHECK(flat.stage_dims() == flat.dims);
}

TEST_CASE("a pipeline's schedule kind is read once, when the plan is, with the fix for a typo",
          "[plan]") {
  using vescale::plan::ScheduleKind;
  const auto zb = Plan::from_json(
      R"({"mesh": [], "pipeline": {"schedule": "zb_h1", "microbatches": 4}, "params": {}})",
      "pp.json");
  CHECK(zb.pipeline()->schedule == ScheduleKind::ZeroBubbleH1);
  const auto plain =
      Plan::from_json(R"({"mesh": [], "pipeline": {"microbatches": 4}, "params": {}})", "pp.json");
  CHECK(plain.pipeline()->schedule == ScheduleKind::OneFOneB);  // the default
  CHECK_THROWS_WITH(
      Plan::from_json(
          R"({"mesh": [], "pipeline": {"schedule": "1fb1", "microbatches": 4}, "params": {}})",
          "pp.json"),
      Contains("plan 'pp.json': pipeline.schedule: unknown schedule kind '1fb1' (did you mean "
               "'1f1b'?); set pipeline.schedule to gpipe, 1f1b, interleaved_1f1b or zb_h1"));
}

TEST_CASE("a context section: parsed with its defaults, bad values and a listed dim named",
          "[plan][context]") {
  const auto c = Plan::from_json(
      R"({"mesh": ["dp"], "context": {"attention": "allgather"}, "params": {"*": ["Replicate"]}})",
      "cp.json");
  REQUIRE(c.context());
  CHECK(c.context()->dim == "cp");
  CHECK(c.context()->attention == ContextAttention::AllGather);
  CHECK(c.context()->zigzag);  // the default balance
  CHECK_THROWS_WITH(
      Plan::from_json(R"({"mesh": ["dp"], "context": {"attention": "rings"}, "params": {}})",
                      "cp.json"),
      Contains("context.attention: must be \"ring\" or \"allgather\", not \"rings\""));
  CHECK_THROWS_WITH(
      Plan::from_json(R"({"mesh": ["dp"], "context": {"balance": "zig"}, "params": {}})",
                      "cp.json"),
      Contains("context.balance: must be \"zigzag\""));
  CHECK_THROWS_WITH(
      Plan::from_json(R"({"mesh": ["dp", "cp"], "context": {}, "params": {}})", "cp.json"),
      Contains("plan 'cp.json': mesh lists 'cp', the context dim: list the model's dims"));
}

TEST_CASE("the context dim joins dp in the model's mesh, which the plan lists", "[plan][context]") {
  const ParallelDims joined({{"pp", 2}, {"dp", 2}, {"cp", 4}, {"tp", 2}}, nullptr);
  CHECK(joined.context == "cp");
  CHECK(joined.cp() == 4);
  CHECK(joined.data == std::vector<std::string>{"dp"});  // cp ranks read the same sequences
  CHECK(joined.data_size() == 2);
  using Dims = std::vector<std::pair<std::string, int64_t>>;
  CHECK(joined.model_dims() == Dims{{"pp", 2}, {"dp", 8}, {"tp", 2}});
  // Without dp, cp becomes it; with dp elsewhere than right before cp, an error naming the fix.
  CHECK(ParallelDims({{"cp", 2}, {"ep", 2}}, nullptr).model_dims() == Dims{{"dp", 2}, {"ep", 2}});
  CHECK_THROWS_WITH(ParallelDims({{"cp", 2}, {"dp", 2}}, nullptr).model_dims(),
                    Contains("put the context dim 'cp' right after 'dp'"));
  // A plan's context section may name another dim.
  const auto plan = Plan::from_json(
      R"({"mesh": ["dp"], "context": {"dim": "seq"}, "params": {"*": ["Replicate"]}})", "s.json");
  const ParallelDims named({{"dp", 2}, {"seq", 2}}, &plan);
  CHECK(named.context == "seq");
  CHECK(named.model_dims() == Dims{{"dp", 4}});
}
