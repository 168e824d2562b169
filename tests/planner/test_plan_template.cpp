// Plans made from the family templates equal the plans written by hand for the same layouts
// (the shipped configs/plans files), so --write and the shipped recipes agree.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>

#include "vescale/common/check.h"
#include "vescale/planner/plan_template.h"

using namespace vescale::planner;
using json = nlohmann::json;

namespace {
const std::string kPlans = std::string(VESCALE_SOURCE_DIR) + "/configs/plans/";
json shipped(const std::string& name) {
  std::ifstream in(kPlans + name + ".json");
  REQUIRE(in.good());
  return json::parse(in);
}
json made(const std::string& family, const Layout& l) {
  return json::parse(plan_for_layout(kPlans + "templates/" + family + ".json", l, 4));
}
}  // namespace

TEST_CASE("template plans equal the hand-written plans of the same layouts", "[planner]") {
  Layout dp_tp_sp;
  dp_tp_sp.dp = 2, dp_tp_sp.tp = 2, dp_tp_sp.sequence_parallel = true;
  auto a = made("llama", dp_tp_sp), b = shipped("llama_dp_tp_sp");
  CHECK(a["mesh"] == b["mesh"]);
  CHECK(a["params"] == b["params"]);
  CHECK(a["forward"] == b["forward"]);
  CHECK(a["grad_reduce"]["dims"] == b["grad_reduce"]["dims"]);

  Layout tp;
  tp.tp = 2;
  CHECK(made("llama", tp)["forward"] == shipped("llama_tp")["forward"]);
  CHECK(made("llama", tp)["params"] == shipped("llama_tp")["params"]);
  CHECK(made("gpt", tp)["params"] == shipped("gpt2_tp")["params"]);

  Layout ep_tp;
  ep_tp.ep = 2, ep_tp.tp = 2;
  a = made("mixtral", ep_tp), b = shipped("mixtral_ep_tp");
  CHECK(a["params"] == b["params"]);
  CHECK(a["moe"] == b["moe"]);
  // A pipeline: the stage's dims in the mesh, the schedule in its section.
  Layout pp_dp;
  pp_dp.pp = 2, pp_dp.dp = 2, pp_dp.schedule = vescale::plan::ScheduleKind::ZeroBubbleH1;
  a = made("llama", pp_dp);
  CHECK(a["mesh"] == json::array({"dp"}));
  CHECK(a["pipeline"]["schedule"] == "zb_h1");
  CHECK(a["pipeline"]["microbatches"] == 4);
  // What a template lacks is named.
  Layout sp;
  sp.tp = 2, sp.sequence_parallel = true;
  CHECK_THROWS_WITH(made("mixtral", sp), Catch::Matchers::Contains("no sequence-parallel rules"));
  CHECK_THROWS_WITH(plan_template_path("no_such_family"),
                    Catch::Matchers::Contains("has no plan template"));
}
