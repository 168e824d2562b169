// Where a window's step time went, per rank and per mesh dim set, from the merged spans:
// the three numbers users of large trainers ask for (exposed communication, overlap,
// the straggler). Every instant of a step is one of:
//   exposed:    some collective or transfer is in flight and the step's thread waits on one;
//   overlapped: some collective or transfer is in flight and the thread works on;
//   compute:    nothing in flight (compute, and any other host work: data, the optimizer).
// So compute + overlapped + exposed = the step time, exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vescale/timeline/trace.h"

namespace vescale::timeline {

struct DimsShare {
  std::string dims;                          // "dp", "tp", "dp+tp", "pp", "world"
  double overlapped_ms = 0, exposed_ms = 0;  // over the window, this dim set's spans alone
  int64_t collectives = 0, bytes = 0;        // transfers counted as collectives
};

struct RankSummary {
  int rank = 0;
  std::string label;
  int64_t steps = 0;
  double step_ms = 0;  // the window's steps, summed
  double compute_ms = 0, overlapped_ms = 0, exposed_ms = 0;
  std::vector<DimsShare> dims;  // sorted by name
};

struct Summary {
  std::vector<RankSummary> ranks;
  // By mean step time. With collectives in every step the ranks' step times are close (each
  // waits for the others), so the straggler is named by compute time instead: the rank the
  // others wait for computes longest and waits least.
  int slowest_rank = 0, fastest_rank = 0;
  double step_gap_ms = 0;  // per step: slowest - fastest
  int straggler_rank = 0, least_compute_rank = 0;
  double compute_gap_ms = 0;  // per step: the straggler's compute - the least
  int64_t steps = 0;

  // A table for the log: a line per rank, then the straggler.
  std::string to_text() const;
  // For the metrics JSONL and the trace's otherData: {"ranks": [...], "straggler": {...}}.
  std::string to_json() const;
};

Summary summarize(const Merged& merged);

}  // namespace vescale::timeline
