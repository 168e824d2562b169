#include <catch2/catch.hpp>

#include "vescale/common/check.h"
#include "vescale/mesh/device_mesh.h"

using vescale::mesh::MeshShape;

TEST_CASE("mesh coordinates are row-major", "[mesh]") {
  MeshShape s({{"pp", 2}, {"dp", 3}, {"tp", 4}}, 24);
  CHECK(s.numel() == 24);
  // rank = pp*12 + dp*4 + tp, written out by hand
  CHECK(s.coordinate(0) == std::vector<int64_t>{0, 0, 0});
  CHECK(s.coordinate(7) == std::vector<int64_t>{0, 1, 3});
  CHECK(s.coordinate(13) == std::vector<int64_t>{1, 0, 1});
  CHECK(s.coordinate(23) == std::vector<int64_t>{1, 2, 3});
  for (int r = 0; r < 24; ++r) CHECK(s.rank_at(s.coordinate(r)) == r);
  CHECK(s.index("dp") == 1);
  CHECK(s.size("tp") == 4);
}

TEST_CASE("mesh groups per dim and per dim set", "[mesh]") {
  MeshShape s({{"pp", 2}, {"dp", 3}, {"tp", 4}}, 24);
  const uint32_t PP = 1, DP = 2, TP = 4;
  // rank 13 = (1, 0, 1)
  CHECK(s.group_ranks(13, TP) == std::vector<int>{12, 13, 14, 15});
  CHECK(s.group_ranks(13, DP) == std::vector<int>{13, 17, 21});
  CHECK(s.group_ranks(13, PP) == std::vector<int>{1, 13});
  CHECK(s.group_ranks(13, DP | TP) ==
        std::vector<int>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(s.group_ranks(13, PP | TP) == std::vector<int>{0, 1, 2, 3, 12, 13, 14, 15});
  CHECK(s.group_ranks(13, PP | DP | TP).size() == 24);
  CHECK(s.group_index(13, TP) == 3);       // (pp=1, dp=0) -> 1*3 + 0
  CHECK(s.group_index(13, DP) == 5);       // (pp=1, tp=1) -> 1*4 + 1
  CHECK(s.group_index(13, DP | TP) == 1);  // pp=1
  CHECK(s.dims_label(PP | TP) == "pp,tp");
  // Every rank is in exactly one group of each set, and the groups of a set partition the mesh.
  for (uint32_t set = 1; set < 8; ++set) {
    std::vector<int> seen(24, 0);
    for (int r = 0; r < 24; ++r)
      for (int m : s.group_ranks(r, set)) seen[m] += 1;
    int group_size = static_cast<int>(s.group_ranks(0, set).size());
    for (int v : seen) CHECK(v == group_size);
  }
}

TEST_CASE("one mesh dim may be inferred with -1", "[mesh]") {
  MeshShape s({{"dp", -1}, {"tp", 2}}, 8);
  CHECK(s.sizes() == std::vector<int64_t>{4, 2});
}

TEST_CASE("bad mesh shapes are rejected clearly", "[mesh]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(MeshShape({{"dp", 2}, {"tp", 4}}, 4),
                    Contains("has 8 devices but the world has 4 ranks"));
  CHECK_THROWS_WITH(MeshShape({{"dp", 2}, {"dp", 2}}, 4), Contains("dim name 'dp' repeats"));
  CHECK_THROWS_WITH(MeshShape({{"dp", 0}}, 4), Contains("dim 'dp' has size 0"));
  CHECK_THROWS_WITH(MeshShape({{"dp", -1}, {"tp", -1}}, 4), Contains("only one dim may be -1"));
  CHECK_THROWS_WITH(MeshShape({{"dp", -1}, {"tp", 3}}, 4), Contains("cannot infer 'dp'"));
  CHECK_THROWS_WITH(MeshShape({}, 4), Contains("no dims given"));
  CHECK_THROWS_WITH(MeshShape({{"", 4}}, 4), Contains("empty name"));
  MeshShape ok({{"dp", 2}, {"tp", 2}}, 4);
  CHECK_THROWS_WITH(ok.index("pp"), Contains("no dim named 'pp'; this mesh has dims [dp, tp]"));
  CHECK_THROWS_WITH(ok.coordinate(4), Contains("rank 4 is outside the mesh of 4"));
}
