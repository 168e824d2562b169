// The regions the kernel tests fill (a local block of a global shape at an offset): rows that
// start and end mid-block, shorter than a block, 3-D. Shared by the CPU kernel test and the
// CUDA-equals-CPU test, so both cover the same cases.
#pragma once
#include <cstdint>
#include <vector>

namespace vescale::testing {

struct FillRegion {
  std::vector<int64_t> global, local, offset;
};

inline const std::vector<FillRegion>& fill_regions() {
  static const std::vector<FillRegion> regions = {
      {{100003}, {100003}, {0}},                // one long run, odd length
      {{1000}, {333}, {17}},                    // starts mid-block (17 % 4 = 1)
      {{37, 129}, {20, 71}, {5, 3}},            // rows of 71 from column 3: every row misaligned
      {{7, 3}, {7, 3}, {0, 0}},                 // rows shorter than a block
      {{5, 300, 67}, {3, 111, 61}, {1, 7, 5}},  // 3-D, odd everything
      {{4099}, {4001}, {97}},
      {{1}, {1}, {0}},
  };
  return regions;
}

}  // namespace vescale::testing
