// Recording spans: each thread writes into its own ring buffer (no lock and no allocation per
// span; a thread's ring is allocated once, on its first span). Off by default; while off, a
// span costs one relaxed load. The trainer switches it on for a window of steps
// (docs/timeline.md), then drains every thread's spans and merges the ranks' (trace.h).
#pragma once
#include <cstdint>
#include <string_view>

#include "vescale/timeline/span.h"

namespace vescale::timeline {

bool enabled();  // one relaxed load
void set_enabled(bool on);

// Nanoseconds on this process's monotonic clock (CLOCK_MONOTONIC), plus the test skew below.
int64_t now_ns();
// Tests only: shifts now_ns() by `ns`, as if this rank's clock were set differently, so that
// clock alignment (dist/clock_sync.h) has an offset to find on one machine.
void set_clock_skew_for_test(int64_t ns);

// On CUDA: compute spans also record a CUDA event on the thread's current stream at each end,
// and drain() gives them the GPU's times (on the host clock, through an anchor event timed
// when this is switched on), so a span covers the GPU work rather than its launch. Returns
// whether device timing is on (false without CUDA or a visible GPU).
bool set_device_timing(bool on);

// The id of `name` in this process's name table (0 for ""). Takes a lock: call it when a
// module or a bucket is set up and keep the id, not once per span.
uint32_t intern(std::string_view name);

// Appends `span` to the calling thread's ring (thread set here). Use when enabled().
void record(Span span);

// A span on the calling thread's compute lane from construction to destruction; nothing when
// the timeline is off at construction.
class Scope {
 public:
  Scope(Kind kind, uint32_t name, int64_t seq = -1);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int64_t begin_ = -1;
  int64_t seq_;
  int32_t device_begin_ = -1;
  uint32_t name_;
  Kind kind_;
};

// Names the collectives this thread issues while it lives ("grad bucket" 3, "redistribute"),
// so the trace says what each one was for. Nests; the innermost wins.
class CommContext {
 public:
  explicit CommContext(uint32_t context, int32_t detail = -1);
  ~CommContext();
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;
  static uint32_t current();
  static int32_t current_detail();

 private:
  uint32_t previous_;
  int32_t previous_detail_;
};

// Two halves of a span whose ends happen in different calls on one thread (a module's backward,
// opened by a hook on its output's gradient and closed by one on its input's). end() closes
// the innermost open span with this kind and name; unmatched ends are ignored.
void begin(Kind kind, uint32_t name);
void end(Kind kind, uint32_t name);
// Closes what begin() left open on this thread (at the end of a step), recording nothing.
void discard_open();

// Every thread's spans recorded since the last drain, in no particular order, with the name
// table. Call while no other thread records (between steps, with the timeline off).
RankSpans drain();

}  // namespace vescale::timeline
