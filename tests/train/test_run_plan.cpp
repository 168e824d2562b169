// run_plan: the step's micro-batches derived from train.global_batch_size by hand-counted data
// ranks, the plan's pipeline fields replaced by --set parallel.pipeline.*, and the errors.
#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/plan/plan.h"
#include "vescale/train/config.h"
#include "vescale/train/run_plan.h"

using Catch::Matchers::Contains;
using vescale::mesh::MeshShape;
using vescale::train::Config;
using vescale::train::run_plan;

namespace {
const std::string kPlans = std::string(VESCALE_SOURCE_DIR) + "/configs/plans/";

Config llama(const std::vector<std::string>& sets) {
  std::vector<std::string> all = {"model.type=\"llama\"", "model.n_layers=4", "model.dim=64",
                                  "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=128",
                                  "model.vocab_size=256", "model.max_seq_len=64",
                                  "train.seq_len=32"};
  all.insert(all.end(), sets.begin(), sets.end());
  return Config::from_json("{}", "t.json", all);
}

std::string error_of(const Config& c, const MeshShape& mesh) {
  try {
    run_plan(c, mesh);
  } catch (const vescale::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("the global batch gives each layout the micro-batches that make it up", "[config]") {
  const auto c = llama({"train.global_batch_size=48", "train.micro_batch_size=2"});
  CHECK(c.train.batch_size == 2);
  // One rank: 24 micro-batches of 2. dp=2 x tp=2: 12 of 2 on each of 2 data ranks.
  auto one = run_plan(c, MeshShape({{"dp", 1}}, 1)).batch;
  CHECK(one.microbatches == 24);
  CHECK(one.data_ranks == 1);
  auto dp_tp = run_plan(c, MeshShape({{"dp", 2}, {"tp", 2}}, 4)).batch;
  CHECK(dp_tp.data_ranks == 2);
  CHECK(dp_tp.microbatches == 12);
  CHECK(dp_tp.global() == 48);
  // ep is a data dim (its ranks hold other tokens): dp=2 x ep=3 is 6 data ranks, 4 each.
  auto dp_ep = run_plan(c, MeshShape({{"dp", 2}, {"ep", 3}}, 6)).batch;
  CHECK(dp_ep.data_ranks == 6);
  CHECK(dp_ep.microbatches == 4);
}

TEST_CASE("under a pipeline plan the global batch sets the pipeline micro-batches", "[config]") {
  const auto c = llama({"train.global_batch_size=16", "train.micro_batch_size=1",
                        "parallel.plan=\"" + kPlans + "llama_pp_dp_tp.json\""});
  // pp=2 is not a data dim: dp=2 gives 2 data ranks, 8 micro-batches each.
  auto r = run_plan(c, MeshShape({{"pp", 2}, {"dp", 2}, {"tp", 2}}, 8));
  REQUIRE(r.plan);
  REQUIRE(r.plan->pipeline());
  CHECK(r.plan->pipeline()->microbatches == 8);
  CHECK(r.batch.microbatches == 8);
  CHECK(r.batch.data_ranks == 2);
  // Without a global batch the plan's own number stands.
  const auto plain = llama({"parallel.plan=\"" + kPlans + "llama_pp_dp_tp.json\""});
  const auto file = vescale::plan::Plan::from_json_file(kPlans + "llama_pp_dp_tp.json");
  CHECK(run_plan(plain, MeshShape({{"pp", 2}, {"dp", 2}, {"tp", 2}}, 8)).batch.microbatches ==
        file.pipeline()->microbatches);
}

TEST_CASE("pipeline fields set in the config replace those of the plan", "[config]") {
  const auto c = llama({"parallel.plan=\"" + kPlans + "llama_pp.json\"",
                        "parallel.pipeline.schedule=zb_h1", "parallel.pipeline.microbatches=6",
                        "parallel.pipeline.stages=[\"layers.2\"]"});
  auto p = run_plan(c, MeshShape({{"pp", 2}}, 2)).plan->pipeline();
  CHECK(p->schedule == vescale::plan::ScheduleKind::ZeroBubbleH1);
  CHECK(p->microbatches == 6);
  CHECK(p->stages == std::vector<std::string>{"layers.2"});
  // Printed back, the overrides survive a round trip; a config without them prints none.
  CHECK(Config::from_json(c.to_json()).parallel.pipeline.microbatches == 6);
  CHECK(llama({}).to_json().find("\"pipeline\"") == std::string::npos);
}

TEST_CASE("batch and pipeline errors name the numbers and the fix", "[config]") {
  // 8 over 3 data ranks of 2: the four numbers and the data dims.
  CHECK_THAT(error_of(llama({"train.global_batch_size=8", "train.micro_batch_size=2"}),
                      MeshShape({{"dp", 3}}, 3)),
             Contains("train.global_batch_size=8 is not a multiple of train.micro_batch_size=2 "
                      "x 3 data ranks (dp=3) = 6"));
  CHECK_THAT(error_of(llama({"parallel.pipeline.chunks=2"}), MeshShape({{"dp", 1}}, 1)),
             Contains("parallel.pipeline.* overrides a plan's \"pipeline\" section, but "
                      "parallel.plan is empty"));
  auto config_error = [](const std::vector<std::string>& sets) {
    try {
      llama(sets);
    } catch (const vescale::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(config_error({"train.global_batch_size=8", "train.grad_accum=2"}),
             Contains("train.grad_accum: is derived from train.global_batch_size"));
  CHECK_THAT(config_error({"train.batch_size=4", "train.micro_batch_size=2"}),
             Contains("train.micro_batch_size=2 and train.batch_size=4 name the same thing"));
  CHECK_THAT(config_error({"parallel.pipeline.schedule=zb_h2"}),
             Contains("parallel.pipeline.schedule"));
}
