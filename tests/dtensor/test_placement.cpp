#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor_spec.h"
#include "vescale/dtensor/placement.h"

using namespace vescale::dtensor;

TEST_CASE("placements parse and print", "[dtensor]") {
  CHECK(Placement::parse("Shard(0)") == Shard(0));
  CHECK(Placement::parse(" Shard( -1 ) ") == Shard(-1));
  CHECK(Placement::parse("Replicate") == Replicate());
  CHECK(Placement::parse("Replicate()") == Replicate());
  CHECK(Placement::parse("Partial") == Partial());
  CHECK(Placement::parse("Partial(max)") == Partial(vescale::dist::ReduceOp::Max));
  CHECK(Shard(2).to_string() == "Shard(2)");
  CHECK(Partial().to_string() == "Partial(sum)");
  CHECK(to_string(Placements{Replicate(), Shard(0)}) == "[Replicate, Shard(0)]");
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(Placement::parse("Shard(x)"), Contains("Shard needs an integer dim"));
  CHECK_THROWS_WITH(Placement::parse("Partial(mean)"), Contains("unknown reduce op 'mean'"));
  CHECK_THROWS_WITH(Placement::parse("Sharded(0)"), Contains("is not a placement"));
}

TEST_CASE("chunk ranges follow torch.chunk", "[dtensor]") {
  // torch.chunk(arange(10), 4) -> sizes 3, 3, 3, 1
  CHECK(chunk_range(10, 4, 0).offset == 0);
  CHECK(chunk_range(10, 4, 0).size == 3);
  CHECK(chunk_range(10, 4, 2).offset == 6);
  CHECK(chunk_range(10, 4, 3).size == 1);
  // torch.chunk(arange(5), 4) -> sizes 2, 2, 1 and an empty fourth
  CHECK(chunk_range(5, 4, 2).size == 1);
  CHECK(chunk_range(5, 4, 3).size == 0);
  CHECK(chunk_range(5, 4, 3).offset == 5);
  CHECK(chunk_range(0, 3, 1).size == 0);
}
