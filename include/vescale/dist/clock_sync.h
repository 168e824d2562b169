// How far each rank's monotonic clock is from rank 0's, for the merged timeline: NTP's estimate
// over point-to-point round trips with rank 0, keeping the round trip with the shortest delay.
#pragma once
#include <cstdint>

namespace vescale::dist {

struct ClockOffset {
  int64_t offset_ns = 0;  // rank 0's clock = this rank's + offset_ns
  int64_t error_ns = 0;   // |true offset - offset_ns| <= error_ns (half the best round trip)
  int64_t at_ns = 0;      // this rank's clock when it was measured
};

// Collective over the world: rank 0 exchanges `rounds` pings with every other rank in turn.
// Times come from timeline::now_ns(); the pings themselves are not recorded. A world of one
// (or no dist::init) gets offset 0, error 0.
ClockOffset estimate_clock_offset(int rounds = 16);

}  // namespace vescale::dist
