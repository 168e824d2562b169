// One timed interval of a rank's work: what the timeline records (recorder.h), merges across
// ranks and writes as a Chrome trace (trace.h). Plain data: the records of every rank are
// gathered as bytes, so a Span holds no pointers; its strings are ids in a per-rank name table.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vescale::timeline {

// What a span covers. Names in the trace's "cat" field: to_string(kind).
enum class Kind : uint8_t {
  Step,       // one optimizer step; seq = the step number (1-based)
  Forward,    // a module's forward (a transformer block, the whole model)
  Backward,   // a module's backward (from its output's gradient to its input's)
  Recompute,  // a forward rerun for activation checkpointing (inside a backward)
  Loss,
  Optimizer,
  GradSync,      // the step's gradient reduction (waiting for the buckets)
  Data,          // reading the batch
  Collective,    // issue to completion; group, seq, bytes set
  Wait,          // the calling thread blocked on a collective or a transfer
  Redistribute,  // a DTensor op's inputs brought to its rule's placements
  Send,          // pipeline point-to-point; peer, tag, seq (per peer and tag) set
  Recv,
  Checkpoint,  // staging a checkpoint (compute lane) or writing it (IO lane)
  Eval,
  Pipeline,  // one pipeline action (forward or backward of a stage's micro-batch)
  Other,
};
const char* to_string(Kind kind);

// The trace thread a span is drawn on. Comm spans go to one lane per group's mesh dims.
enum class Lane : uint8_t { Compute, Comm, P2P, IO };

struct Span {
  int64_t begin_ns = 0, end_ns = 0;  // this rank's monotonic clock (recorder.h: now_ns)
  int64_t bytes = 0;                 // collectives and transfers: the bytes this rank put in
  int64_t seq = -1;      // collective: its number on the group; send/recv: per (peer, tag)
  uint32_t name = 0;     // id in the rank's name table: "layers.3", "all_reduce", ...
  uint32_t group = 0;    // collective/transfer: the group's name ("mesh0/dp,tp/1"); 0 = none
  uint32_t context = 0;  // collective: what issued it ("grad bucket", "redistribute"); 0 = none
  int32_t peer = -1;     // send/recv: the other end's world rank
  int32_t tag = 0;       // send/recv: the tag
  int32_t detail = -1;   // a number that goes with the context (the bucket's index)
  uint16_t thread = 0;   // the recording thread's index in this process (0: the first one)
  Kind kind = Kind::Other;
  Lane lane = Lane::Compute;
  uint8_t pad[4] = {};  // explicit, so the bytes of a record are all defined
  // With device timing (CUDA): the ends' events, replaced by their times when drained; -1: none.
  int32_t device_begin = -1, device_end = -1;
};

// A rank's spans with the table their name ids refer to (ids index `names`; 0 is "").
struct RankSpans {
  std::vector<Span> spans;
  std::vector<std::string> names;
  int64_t dropped = 0;  // spans lost because a thread's ring filled (oldest first)
};

}  // namespace vescale::timeline
