// Pipeline schedules as data (docs/pipeline.md). A schedule is, for every pipeline rank, the
// list of actions it runs in order: compute (forward, full backward, or backward split into
// its input-gradient and weight-gradient halves) and the point-to-point transfers between
// stages. One generator per schedule kind writes the lists; validate() proves them runnable
// (every send has its receive, nothing waits on something that never comes) before the first
// step; simulate() times them from per-action costs. No libtorch: pure data.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vescale/plan/schedule_kind.h"

namespace vescale::parallel::pipeline {

using plan::ScheduleKind;

enum class Op : uint8_t {
  Forward,         // F: the stage's layers on one micro-batch
  Backward,        // B: input and weight gradients together
  BackwardInput,   // I: the input gradient only (the previous stage can go on)
  BackwardWeight,  // W: the weight gradients I left queued
  SendActivation,  // stage's output -> the rank of stage + 1
  RecvActivation,  // stage's input  <- the rank of stage - 1
  SendGrad,        // gradient of stage's input  -> the rank of stage - 1
  RecvGrad,        // gradient of stage's output <- the rank of stage + 1
};

struct Action {
  Op op;
  int stage;       // global stage index (0 .. stages - 1)
  int microbatch;  // 0 .. microbatches - 1
  bool operator==(const Action&) const = default;
};

// "F3@s1" (op letter F/B/I/W, micro-batch, stage); transfers "sendF3@s1", "recvF3@s1",
// "sendB3@s1", "recvB3@s1".
std::string to_string(const Action& a);
// One rank's list as text (to_string joined by spaces), and back; parse throws naming the
// token it cannot read.
std::string serialize(const std::vector<Action>& actions);
std::vector<Action> parse_actions(const std::string& text);

struct Schedule {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int ranks = 0;     // pipeline ranks (the pp mesh dim's size)
  int stages = 0;    // ranks * chunks: virtual stages, each a run of consecutive layers
  int microbatches = 0;
  std::vector<int> stage_rank;               // stage -> the pp rank that runs it
  std::vector<std::vector<Action>> actions;  // per pp rank, in order, transfers included

  int chunks() const { return ranks > 0 ? stages / ranks : 0; }
  std::vector<int> stages_of(int rank) const;  // ascending
  // Whether the schedule splits backward into I and W (zero-bubble kinds).
  bool splits_backward() const;
};

// The schedule of `kind` for `ranks` pipeline ranks, `microbatches` micro-batches and `chunks`
// virtual stages per rank (interleaved_1f1b: chunks >= 2, stage s on rank s % ranks; the
// others: chunks == 1). Throws vescale::Error naming the bad argument and the fix
// (microbatches < ranks, chunks not allowed for the kind).
//
// Compute order per rank r (p = ranks, M = microbatches):
//   gpipe             F0 .. F(M-1), then B0 .. B(M-1).
//   1f1b              min(p-1-r, M) warm-up forwards, then (F, B) pairs, then the remaining Bs.
//   interleaved_1f1b  micro-batches in rounds of at least p (M / p rounds, sizes differing by at
//                     most one, so any M >= p works); forwards round by round, chunk by chunk
//                     (chunk 0 first), backwards the same with chunks in reverse; warm-up
//                     min((chunks-1) * first round + 2 * (p-1-r), M * chunks) forwards, then
//                     1F1B, then the remaining backwards.
//   zb_h1             1f1b with each B split into I and W; rank r keeps up to r Ws queued
//                     (runs the oldest whenever more are queued), one W after each cool-down I,
//                     the rest at the end: the I goes up the pipeline without waiting for its
//                     W, the queued Ws fill the drain, and every rank peaks at p micro-batches
//                     in flight (1F1B's peak, on rank 0). Bubble (p-1)(F+I-W) per rank.
// Transfers are placed next to the compute that needs them: a RecvActivation right before the
// F that reads it, a SendActivation right after the F that made it (RecvGrad / SendGrad the
// same around B or I); none between stages on the same rank. A send whose peer receives an
// older tensor from this rank first waits until that one is sent (NCCL matches in order; only
// interleaved_1f1b on 2 ranks with uneven rounds, where activations and gradients share each
// direction, needs it).
Schedule make_schedule(ScheduleKind kind, int ranks, int microbatches, int chunks = 1);

// Checks the lists run: every F, and either a B or an I and a W, exactly once per (stage,
// micro-batch), on the stage's rank, after what it needs (its input, its output gradient, its
// forward, its I); every send has its receive and the sends from one rank to another come in
// the order the peer receives them (NCCL matches them in order); and a replay with blocking
// receives and non-blocking sends reaches the end on every rank (no deadlock). Throws
// vescale::Error "pipeline schedule <kind>: rank R, action K (<action>): <what is wrong>" (K
// counts from 0); a deadlock names every stuck rank that way, and a missing compute action
// "rank R: <action> is missing".
void validate(const Schedule& schedule);

// Time per action, in any unit. A full backward costs backward_input + backward_weight.
struct ActionCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
  double p2p = 0;  // from a send's start to the matching receive's end
  // Per stage, a factor on its compute costs (stages of unequal work: the embedding and the
  // head on the end stages). Empty: 1 for every stage.
  std::vector<double> stage_weight = {};
  double weight(int stage) const {
    return stage_weight.empty() ? 1.0 : stage_weight.at(static_cast<size_t>(stage));
  }
};

struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

struct Simulation {
  double makespan = 0;              // the last action's end on any rank
  std::vector<double> busy;         // per rank: time spent computing
  double bubble_fraction = 0;       // 1 - sum(busy) / (ranks * makespan)
  std::vector<int> peak_in_flight;  // per rank: most micro-batch-stages whose forward ran and
                                    // whose backward (B, or W when split) had not yet
  std::vector<int> peak_awaiting_weight;  // per rank: most micro-batch-stages whose I ran and
                                          // whose W had not yet (split schedules)
  std::vector<std::vector<TimedAction>> timeline;  // per rank, compute and transfers
};

// Replays the lists (as validate does) with the costs: each rank runs its actions in order, a
// receive ends no earlier than its send's start + p2p, sends do not block.
Simulation simulate(const Schedule& schedule, const ActionCosts& costs = {});

// The textbook bubble of GPipe and 1F1B, (p - 1) / (m + p - 1).
double textbook_bubble(int ranks, int microbatches);

// A text timeline for `vescale-train --print-schedule`: a header (kind, ranks, stages,
// micro-batches), one line per rank with each compute action as a cell as wide as its cost
// ("F0", "B3", "I1", "W1", a ".c" chunk suffix when chunks > 1) and idle time as dots, then
// the simulated bubble beside the textbook one and each rank's peak in-flight micro-batches.
std::string render_timeline(const Schedule& schedule, const Simulation& simulation);

}  // namespace vescale::parallel::pipeline
