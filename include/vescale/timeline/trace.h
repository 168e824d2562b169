// The merged timeline: every rank's spans on rank 0's clock, written as one Chrome trace JSON
// (Perfetto, chrome://tracing) and optionally as one file per rank for HolisticTraceAnalysis.
// Pure functions of the gathered data; the gathering itself is the trainer's (dist/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vescale/timeline/span.h"

namespace vescale::timeline {

// One clock measurement: rank 0's clock = this rank's + offset_ns near local time at_ns,
// within error_ns (dist::estimate_clock_offset).
struct ClockSample {
  int64_t at_ns = 0, offset_ns = 0, error_ns = 0;
};

// What one rank hands to rank 0 at the end of a window.
struct RankTrace {
  int rank = 0;
  std::string label;               // "rank 3 (pp=0, dp=1, tp=1)"
  std::vector<ClockSample> clock;  // at the window's start and end; offsets interpolate
  int64_t window_begin_ns = 0;     // local clock; spans ending before it are stale
  int64_t window_end_ns = 0;
  std::string world_dims;  // the mesh dims whose group is the world ("dp+tp"), if any
  RankSpans spans;
};
std::string serialize(const RankTrace& trace);
// Throws vescale::Error when the bytes are not a serialized RankTrace.
RankTrace deserialize(const std::string& bytes);

// Rank 0's clock for this rank's local time (linear between the clock samples).
int64_t to_rank0_clock(const RankTrace& trace, int64_t local_ns);
// The larger estimate error of the rank's samples.
int64_t clock_error_ns(const RankTrace& trace);

// The ranks' spans on rank 0's clock, stale ones dropped, each send ending no later than its
// receive (a Gloo transfer's end is only seen when waited on), and the send/recv pairs.
struct Merged {
  struct Rank {
    int rank = 0;
    std::string label;
    std::vector<ClockSample> clock;
    std::vector<Span> spans;  // begin_ns/end_ns on rank 0's clock
    std::vector<std::string> names;
    int64_t dropped = 0;
    std::string world_dims;
    const std::string& name(uint32_t id) const;
    // The mesh dims of a span's group: group_dims of its name, the world named by world_dims.
    std::string dims(const Span& s) const;
  };
  struct Flow {  // a transfer: ranks[from].spans[send] -> ranks[to].spans[recv]
    size_t from = 0, send = 0, to = 0, recv = 0;
  };
  std::vector<Rank> ranks;  // in rank order
  std::vector<Flow> flows;
};
Merged merge(const std::vector<RankTrace>& ranks);

// "dp", "tp", "dp+tp", "world" for a group name ("mesh0/dp,tp/1", "world").
std::string group_dims(const std::string& group_name);

// The Chrome trace (JSON object format): a process per rank named by its label, threads for
// compute, each mesh dim set's collectives, P2P and IO (overlapping spans get extra lanes
// "comm dp #2"), flow arrows from each send to its receive, and `other_data_json` (a JSON
// object: the window, the summary) with every rank's clock offset under "otherData".
std::string chrome_trace_json(const Merged& merged, const std::string& other_data_json = "{}");
// One rank's spans as its own trace with "distributedInfo" (rank, world size, backend), the
// per-rank layout HolisticTraceAnalysis reads.
std::string rank_trace_json(const Merged& merged, size_t index, const std::string& backend);

// `s` as a JSON string body: quotes, backslashes and every control character escaped, and
// invalid UTF-8 replaced by U+FFFD (Perfetto rejects both).
std::string json_escape(const std::string& s);

}  // namespace vescale::timeline
