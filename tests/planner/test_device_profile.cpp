// Device profiles as JSON: what to_json writes reads back the same, and each bad field is named.
#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/planner/device_profile.h"

using namespace vescale::planner;
using Catch::Matchers::Contains;

namespace {
// The smallest profile the reader takes; `extra` goes inside the top-level object.
std::string profile(const std::string& extra = "", const std::string& intra_extra = "") {
  return R"({"peak_flops": 1e15, "memory_bytes": 8e10, "memory_bandwidth": 3e12,
             "gemm_efficiency": 0.75, "gemm_half_work": 4e9, "gpus_per_node": 8,
             "intra_node": {"bandwidth": 4.5e11, "latency": 5e-6)" +
         intra_extra + R"(},
             "inter_node": {"bandwidth": 5e10, "latency": 1e-5})" +
         extra + "}";
}
}  // namespace

TEST_CASE("a device profile written and read back is the same profile", "[planner]") {
  DeviceProfile p = device_profile_from_json(profile(), "toy.json");
  CHECK(p.name == "toy");         // the file's stem when it names none
  CHECK(p.fp32_peak_flops == 0);  // not given: not known
  CHECK_FALSE(p.attention_keeps_probabilities);
  p.name = "measured";
  p.fp32_peak_flops = 2e14;
  p.attention_keeps_probabilities = true;
  p.op_overhead = 2e-6;
  p.intra_node.measured[Collective::ReduceScatter] = {1.5e11, 9e-6};
  p.sources["peak_flops"] = "a datasheet";
  const DeviceProfile q = device_profile_from_json(to_json(p), "any.json");
  CHECK(q.name == "measured");
  CHECK(q.peak_flops == 1e15);
  CHECK(q.fp32_peak_flops == 2e14);
  CHECK(q.attention_keeps_probabilities);
  CHECK(q.op_overhead == 2e-6);
  CHECK(q.gpus_per_node == 8);
  CHECK(q.intra_node.bandwidth == 4.5e11);
  CHECK(q.inter_node.latency == 1e-5);
  REQUIRE(q.intra_node.measured.size() == 1);
  CHECK(q.intra_node.of(Collective::ReduceScatter).bandwidth == 1.5e11);
  CHECK(q.intra_node.of(Collective::AllGather).bandwidth == 4.5e11);  // not measured: the link's
  CHECK(q.inter_node.measured.empty());
  CHECK(q.sources.at("peak_flops") == "a datasheet");
}

TEST_CASE("a bad device profile names the field and the fix", "[planner]") {
  auto error = [](const std::string& text) {
    try {
      device_profile_from_json(text, "p.json");
    } catch (const vescale::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error(profile(R"(, "fp32_peak_flop": 1e14)")),
             Contains("fp32_peak_flop: unknown key; did you mean fp32_peak_flops?"));
  CHECK_THAT(error(profile(R"(, "fp32_peak_flops": 0)")),
             Contains("fp32_peak_flops: must be a positive number"));
  CHECK_THAT(error(profile(R"(, "op_overhead": -1)")),
             Contains("op_overhead: must be a number >= 0"));
  CHECK_THAT(error(profile("", R"(, "reduce_scatter": {"bandwidth": 1e9})")),
             Contains("intra_node.reduce_scatter.latency: missing"));
  CHECK_THAT(error(R"({"peak_flops": 1e15})"), Contains("memory_bytes: missing"));
  CHECK_THAT(error("{"), Contains("device profile 'p.json': not valid JSON"));
  DeviceProfile p = device_profile_from_json(profile(), "p.json");
  p.gemm_efficiency = 1.5;
  CHECK_THAT(error(to_json(p)), Contains("gemm_efficiency: a fraction of the peak, at most 1"));
  // Planning an fp32 config needs the fp32 peak.
  CHECK_THROWS_WITH(p.peak(true), Contains("has no fp32_peak_flops"));
  CHECK(p.peak(false) == 1e15);
}
