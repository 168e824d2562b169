// Internal: CUDA events for spans of GPU work (docs/timeline.md). A span's host times say when
// the work was launched; on CUDA the trainer turns device timing on and the recorder also
// records an event on the thread's current stream at each end, which drain() turns into host
// clock times through an anchor event timed at the window's start. Without CUDA every call is
// a no-op and device_timing_available() is false.
#pragma once
#include <cstdint>
#include <vector>

namespace vescale::timeline::detail {

bool device_timing_available();
// Creates the event pool once, records the anchor on the current stream, waits for it and
// notes the host time. Restarts the pool's numbering.
void device_window_begin();
// An event recorded now on the current stream: its id, or -1 when the pool is used up.
int32_t device_event();
// The host-clock time of every event recorded since device_window_begin (waits for the GPU).
std::vector<int64_t> device_event_times();

}  // namespace vescale::timeline::detail
