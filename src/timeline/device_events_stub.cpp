// Built when nvcc is absent: no device timing; spans keep their host times.
#include "timeline/device_events.h"

namespace vescale::timeline::detail {

bool device_timing_available() { return false; }
void device_window_begin() {}
int32_t device_event() { return -1; }
std::vector<int64_t> device_event_times() { return {}; }

}  // namespace vescale::timeline::detail
