// Pipeline schedules as data (vescale/parallel/pipeline/schedule.h): the compute order each
// kind writes, the transfers placed around it, the validator that proves a list runnable (and
// names the rank and action when it is not), and the simulator's bubble against the textbook.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/parallel/pipeline/schedule.h"

using namespace vescale::parallel::pipeline;
using vescale::plan::parse_schedule_kind;
using vescale::plan::schedule_kinds;
using Catch::Matchers::Contains;

// For messages of failed comparisons of action lists (libtorch's logging prints vectors).
namespace vescale::parallel::pipeline {
std::ostream& operator<<(std::ostream& os, const Action& a) { return os << to_string(a); }
}  // namespace vescale::parallel::pipeline

namespace {

bool is_compute(const Action& a) { return a.op <= Op::BackwardWeight; }

// Rank r's compute actions only, as text.
std::string compute_order(const Schedule& s, int rank) {
  std::vector<Action> compute;
  for (const Action& a : s.actions[rank])
    if (is_compute(a)) compute.push_back(a);
  return serialize(compute);
}

// The validator's message for `s`, or "" when it passes.
std::string validation_error(const Schedule& s) {
  try {
    validate(s);
  } catch (const vescale::Error& e) {
    return e.what();
  }
  return "";
}

// A schedule of `kind` whose lists are replaced by `lists` (one text per rank).
Schedule with_lists(Schedule s, const std::vector<std::string>& lists) {
  for (size_t r = 0; r < lists.size(); ++r) s.actions[r] = parse_actions(lists[r]);
  return s;
}

ActionCosts unit_costs() { return ActionCosts{1, 1, 1, 0}; }

}  // namespace

// ---- Compute orders, written out by hand from the rules in schedule.h -----------------------

TEST_CASE("gpipe runs every forward, then every backward", "[pipeline]") {
  const Schedule s = make_schedule(ScheduleKind::GPipe, 2, 4);
  CHECK(compute_order(s, 0) == "F0@s0 F1@s0 F2@s0 F3@s0 B0@s0 B1@s0 B2@s0 B3@s0");
  CHECK(compute_order(s, 1) == "F0@s1 F1@s1 F2@s1 F3@s1 B0@s1 B1@s1 B2@s1 B3@s1");
}

TEST_CASE("1f1b: p-1-r warm-up forwards, then (F, B) pairs, then the remaining Bs", "[pipeline]") {
  SECTION("p=2 M=4") {
    const Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 4);
    CHECK(compute_order(s, 0) == "F0@s0 F1@s0 B0@s0 F2@s0 B1@s0 F3@s0 B2@s0 B3@s0");
    CHECK(compute_order(s, 1) == "F0@s1 B0@s1 F1@s1 B1@s1 F2@s1 B2@s1 F3@s1 B3@s1");
  }
  SECTION("p=4 M=8") {
    const Schedule s = make_schedule(ScheduleKind::OneFOneB, 4, 8);
    CHECK(compute_order(s, 0) ==
          "F0@s0 F1@s0 F2@s0 F3@s0 B0@s0 F4@s0 B1@s0 F5@s0 B2@s0 F6@s0 B3@s0 F7@s0 B4@s0 "
          "B5@s0 B6@s0 B7@s0");
    CHECK(compute_order(s, 1) ==
          "F0@s1 F1@s1 F2@s1 B0@s1 F3@s1 B1@s1 F4@s1 B2@s1 F5@s1 B3@s1 F6@s1 B4@s1 F7@s1 "
          "B5@s1 B6@s1 B7@s1");
    CHECK(compute_order(s, 2) ==
          "F0@s2 F1@s2 B0@s2 F2@s2 B1@s2 F3@s2 B2@s2 F4@s2 B3@s2 F5@s2 B4@s2 F6@s2 B5@s2 "
          "F7@s2 B6@s2 B7@s2");
    CHECK(compute_order(s, 3) ==
          "F0@s3 B0@s3 F1@s3 B1@s3 F2@s3 B2@s3 F3@s3 B3@s3 F4@s3 B4@s3 F5@s3 B5@s3 F6@s3 "
          "B6@s3 F7@s3 B7@s3");
  }
}

TEST_CASE("interleaved_1f1b: rounds of micro-batches, chunk by chunk, then 1F1B", "[pipeline]") {
  SECTION("p=2 M=4 v=2: two rounds {0,1} {2,3}; warm-up 1*2 + 2*(1-r)") {
    const Schedule s = make_schedule(ScheduleKind::Interleaved1F1B, 2, 4, 2);
    CHECK(s.stages == 4);
    CHECK(s.stage_rank == std::vector<int>{0, 1, 0, 1});
    CHECK(s.stages_of(0) == std::vector<int>{0, 2});
    CHECK(s.stages_of(1) == std::vector<int>{1, 3});
    // Rank 0: forwards s0 s0 s2 s2 | s0 s0 s2 s2, backwards s2 s2 s0 s0 | s2 s2 s0 s0; warm-up 4.
    CHECK(compute_order(s, 0) ==
          "F0@s0 F1@s0 F0@s2 F1@s2 F2@s0 B0@s2 F3@s0 B1@s2 F2@s2 B0@s0 F3@s2 B1@s0 "
          "B2@s2 B3@s2 B2@s0 B3@s0");
    // Rank 1: warm-up 2.
    CHECK(compute_order(s, 1) ==
          "F0@s1 F1@s1 F0@s3 B0@s3 F1@s3 B1@s3 F2@s1 B0@s1 F3@s1 B1@s1 F2@s3 B2@s3 "
          "F3@s3 B3@s3 B2@s1 B3@s1");
  }
  SECTION("p=2 M=5 v=2: M not a multiple of p; rounds {0,1,2} {3,4}, warm-up 1*3 + 2*(1-r)") {
    const Schedule s = make_schedule(ScheduleKind::Interleaved1F1B, 2, 5, 2);
    CHECK(compute_order(s, 0) ==
          "F0@s0 F1@s0 F2@s0 F0@s2 F1@s2 F2@s2 B0@s2 F3@s0 B1@s2 F4@s0 B2@s2 F3@s2 B0@s0 "
          "F4@s2 B1@s0 B2@s0 B3@s2 B4@s2 B3@s0 B4@s0");
    CHECK(compute_order(s, 1) ==
          "F0@s1 F1@s1 F2@s1 F0@s3 B0@s3 F1@s3 B1@s3 F2@s3 B2@s3 F3@s1 B0@s1 F4@s1 B1@s1 "
          "F3@s3 B2@s1 F4@s3 B3@s3 B4@s3 B3@s1 B4@s1");
  }
  SECTION("p=2 with uneven rounds: a send waits for the one its peer receives first") {
    // Rank 1 receives F3 (for s1) before B0's gradient (for s1), so rank 0 posts sendF3@s0
    // first although B0@s2 ran before F3@s0: NCCL pairs the two in order.
    const Schedule s = make_schedule(ScheduleKind::Interleaved1F1B, 2, 5, 2);
    CHECK_THAT(serialize(s.actions[0]),
               Contains("recvB0@s2 B0@s2 F3@s0 sendF3@s0 sendB0@s2 recvB1@s2"));
  }
}

TEST_CASE("zb_h1: 1f1b with B split into I and W, rank r keeping up to r Ws queued", "[pipeline]") {
  SECTION("p=2 M=4") {
    const Schedule s = make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4);
    CHECK(s.splits_backward());
    // Rank 0 keeps none: each W right after its I; the cool-down I too.
    CHECK(compute_order(s, 0) ==
          "F0@s0 F1@s0 I0@s0 W0@s0 F2@s0 I1@s0 W1@s0 F3@s0 I2@s0 W2@s0 I3@s0 W3@s0");
    // Rank 1 keeps one: the oldest W runs once a second is queued; the last at the end.
    CHECK(compute_order(s, 1) ==
          "F0@s1 I0@s1 F1@s1 I1@s1 W0@s1 F2@s1 I2@s1 W1@s1 F3@s1 I3@s1 W2@s1 W3@s1");
  }
  SECTION("p=4 M=8: the last rank keeps three, the first none and one W per cool-down I") {
    const Schedule s = make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8);
    CHECK(compute_order(s, 3) ==
          "F0@s3 I0@s3 F1@s3 I1@s3 F2@s3 I2@s3 F3@s3 I3@s3 W0@s3 F4@s3 I4@s3 W1@s3 F5@s3 "
          "I5@s3 W2@s3 F6@s3 I6@s3 W3@s3 F7@s3 I7@s3 W4@s3 W5@s3 W6@s3 W7@s3");
    CHECK(compute_order(s, 0) ==
          "F0@s0 F1@s0 F2@s0 F3@s0 I0@s0 W0@s0 F4@s0 I1@s0 W1@s0 F5@s0 I2@s0 W2@s0 F6@s0 "
          "I3@s0 W3@s0 F7@s0 I4@s0 W4@s0 I5@s0 W5@s0 I6@s0 W6@s0 I7@s0 W7@s0");
  }
  CHECK_FALSE(make_schedule(ScheduleKind::OneFOneB, 2, 4).splits_backward());
}

TEST_CASE("transfers sit next to the compute that needs them (1f1b p=2 M=2)", "[pipeline]") {
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  CHECK(serialize(s.actions[0]) ==
        "F0@s0 sendF0@s0 F1@s0 sendF1@s0 recvB0@s0 B0@s0 recvB1@s0 B1@s0");
  CHECK(serialize(s.actions[1]) ==
        "recvF0@s1 F0@s1 B0@s1 sendB0@s1 recvF1@s1 F1@s1 B1@s1 sendB1@s1");
}

// ---- Every generated schedule is runnable -----------------------------------------------------

TEST_CASE("every kind validates for p in 2..8, M in p..3p+1 (interleaved: v in 2..4)",
          "[pipeline]") {
  for (ScheduleKind kind : schedule_kinds())
    for (int p = 2; p <= 8; ++p)
      for (int m = p; m <= 3 * p + 1; ++m)
        for (int v = 1; v <= 4; ++v) {
          if ((kind == ScheduleKind::Interleaved1F1B) != (v > 1)) continue;
          const Schedule s = make_schedule(kind, p, m, v);
          INFO(to_string(kind) << " p=" << p << " M=" << m << " v=" << v);
          REQUIRE(validation_error(s) == "");
          CHECK(s.ranks == p);
          CHECK(s.stages == p * v);
          CHECK(s.chunks() == v);
          CHECK(s.microbatches == m);
        }
}

// ---- Simulation -----------------------------------------------------------------------------

TEST_CASE("simulate: gpipe and 1f1b with F=I=W=1 and free p2p give the textbook bubble",
          "[pipeline]") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p = 2; p <= 8; ++p)
      for (int m = p; m <= 3 * p + 1; ++m) {
        const Simulation sim = simulate(make_schedule(kind, p, m), unit_costs());
        INFO(to_string(kind) << " p=" << p << " M=" << m);
        CHECK(std::abs(sim.bubble_fraction - textbook_bubble(p, m)) < 1e-12);
        CHECK(sim.makespan == Approx(3.0 * (m + p - 1)));
        for (double busy : sim.busy) CHECK(busy == Approx(3.0 * m));
      }
  CHECK(textbook_bubble(4, 8) == Approx(3.0 / 11));
}

TEST_CASE("simulate: zb_h1 has a smaller bubble than 1f1b, (p-1)(F+I-W) per rank", "[pipeline]") {
  const Simulation zb = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8), unit_costs());
  const Simulation base = simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8), unit_costs());
  CHECK(zb.bubble_fraction < base.bubble_fraction);
  // The zero-bubble paper's ZB-H1 bound, for W no dearer than I.
  for (const ActionCosts& c : {unit_costs(), ActionCosts{1, 1.5, 0.5, 0}})
    for (int p = 2; p <= 8; ++p)
      for (int m = p; m <= 3 * p + 1; ++m) {
        const Simulation sim = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m), c);
        const double work = c.forward + c.backward_input + c.backward_weight;
        INFO("p=" << p << " M=" << m << " W=" << c.backward_weight);
        CHECK(sim.makespan ==
              Approx(m * work + (p - 1) * (c.forward + c.backward_input - c.backward_weight)));
        // Every rank holds at most p micro-batches, as 1f1b's rank 0 does.
        CHECK(sim.peak_in_flight == std::vector<int>(p, p));
      }
}

TEST_CASE("simulate: interleaving shrinks the bubble", "[pipeline]") {
  // Costs are per action, and an interleaved stage holds 1/v of a 1f1b stage's layers: scale
  // them by 1/v so both schedules do the same work per rank and only the idle time differs.
  const int v = 2;
  const double c = 1.0 / v;
  const Simulation inter =
      simulate(make_schedule(ScheduleKind::Interleaved1F1B, 4, 8, v), ActionCosts{c, c, c, 0});
  const Simulation base = simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8), unit_costs());
  CHECK(inter.bubble_fraction < base.bubble_fraction);
  CHECK(inter.busy == base.busy);
  // Megatron's (p-1)(F+B)/v drain when M is a multiple of p.
  for (int p = 2; p <= 8; ++p)
    for (int m = p; m <= 3 * p; m += p)
      for (int chunks = 2; chunks <= 4; ++chunks) {
        const double k = 1.0 / chunks;
        const Simulation sim =
            simulate(make_schedule(ScheduleKind::Interleaved1F1B, p, m, chunks), ActionCosts{k, k, k, 0});
        INFO("p=" << p << " M=" << m << " v=" << chunks);
        CHECK(sim.makespan == Approx(3.0 * m + 3.0 * (p - 1) / chunks));
      }
}

TEST_CASE("simulate: peak in-flight micro-batches", "[pipeline]") {
  for (int p = 2; p <= 6; ++p)
    for (int m = p; m <= 2 * p + 1; ++m) {
      INFO("p=" << p << " M=" << m);
      CHECK(simulate(make_schedule(ScheduleKind::OneFOneB, p, m)).peak_in_flight[0] == p);
      CHECK(simulate(make_schedule(ScheduleKind::OneFOneB, p, m)).peak_in_flight[p - 1] == 1);
      CHECK(simulate(make_schedule(ScheduleKind::GPipe, p, m)).peak_in_flight[0] == m);
    }
}

TEST_CASE("simulate: a receive ends p2p after its send starts and sends take no time", "[pipeline]") {
  const Simulation sim = simulate(make_schedule(ScheduleKind::OneFOneB, 2, 2), ActionCosts{1, 1, 1, 0.5});
  // Rank 1 gets F0 at 1.5 and sends B0's gradient at 4.5; rank 0 waits for it until 5, then
  // for B1's (sent at 7.5) until 8, and ends at 10.
  CHECK(sim.makespan == Approx(10));
  CHECK(sim.busy == std::vector<double>{6, 6});
  CHECK(sim.bubble_fraction == Approx(0.4));
  const TimedAction& recv_f0 = sim.timeline[1][0];
  CHECK(recv_f0.action == Action{Op::RecvActivation, 1, 0});
  CHECK(recv_f0.start == Approx(0));
  CHECK(recv_f0.end == Approx(1.5));
  const TimedAction& send_f0 = sim.timeline[0][1];
  CHECK(send_f0.action == Action{Op::SendActivation, 0, 0});
  CHECK(send_f0.start == send_f0.end);
}

TEST_CASE("render_timeline: a header, one line per rank, the bubble and peak memory",
          "[pipeline]") {
  const Schedule s = make_schedule(ScheduleKind::OneFOneB, 4, 8);
  const std::string text = render_timeline(s, simulate(s, unit_costs()));
  CHECK_THAT(text, Contains("pipeline schedule 1f1b: 4 ranks, 4 stages"));
  CHECK_THAT(text, Contains("8 micro-batches"));
  CHECK_THAT(text, Contains("rank 3 |...."));
  CHECK_THAT(text, Contains("bubble 27.3% simulated, 27.3% textbook"));
  CHECK_THAT(text, Contains("peak in-flight micro-batch-stages per rank: 4 3 2 1"));
  const Schedule inter = make_schedule(ScheduleKind::Interleaved1F1B, 2, 4, 2);
  CHECK_THAT(render_timeline(inter, simulate(inter)), Contains("B0.1"));  // chunk suffix

  // Under 160 characters a line for p <= 8 and M <= 16.
  for (ScheduleKind kind : schedule_kinds())
    for (int p = 2; p <= 8; p += 2)
      for (int m : {p, 16}) {
        const int v = kind == ScheduleKind::Interleaved1F1B ? 4 : 1;
        const double c = 1.0 / v;
        const Schedule sch = make_schedule(kind, p, m, v);
        std::istringstream lines(render_timeline(sch, simulate(sch, ActionCosts{c, c, c, 0})));
        for (std::string line; std::getline(lines, line);) {
          INFO(to_string(kind) << " p=" << p << " M=" << m << ": " << line);
          CHECK(line.size() < 160);
        }
      }
}

// ---- The validator rejects broken lists, naming the rank and the action ------------------

TEST_CASE("validate rejects broken lists, naming rank and action", "[pipeline]") {
  const Schedule good = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  const std::string rank0 = serialize(good.actions[0]), rank1 = serialize(good.actions[1]);
  REQUIRE(validation_error(good) == "");

  SECTION("a removed receive") {
    const std::string err = validation_error(
        with_lists(good, {rank0, "recvF0@s1 F0@s1 B0@s1 sendB0@s1 F1@s1 B1@s1 sendB1@s1"}));
    CHECK_THAT(err, Contains("pipeline schedule 1f1b: rank 1, action 4 (F1@s1)"));
    CHECK_THAT(err, Contains("needs recvF1@s1 first, which rank 1 never runs"));
  }
  SECTION("swapped sends: rank 0 sends micro-batch 1 first, rank 1 receives 0 first") {
    const std::string err = validation_error(with_lists(
        good, {"F0@s0 F1@s0 sendF1@s0 sendF0@s0 recvB0@s0 B0@s0 recvB1@s0 B1@s0", rank1}));
    CHECK_THAT(err, Contains("rank 0, action 2 (sendF1@s0)"));
    CHECK_THAT(err, Contains("recvF0@s1"));
    CHECK_THAT(err, Contains("in order"));
  }
  SECTION("a backward before its forward") {
    const std::string err = validation_error(with_lists(
        good, {rank0, "recvF0@s1 B0@s1 F0@s1 sendB0@s1 recvF1@s1 F1@s1 B1@s1 sendB1@s1"}));
    CHECK_THAT(err, Contains("rank 1, action 1 (B0@s1)"));
    CHECK_THAT(err, Contains("needs F0@s1 first, which rank 1 runs later (action 2)"));
  }
  SECTION("a deadlock: both ranks receive first") {
    const std::string err = validation_error(with_lists(
        good, {"recvB0@s0 F0@s0 sendF0@s0 F1@s0 sendF1@s0 B0@s0 recvB1@s0 B1@s0", rank1}));
    CHECK_THAT(err, Contains("deadlock"));
    CHECK_THAT(err, Contains("rank 0, action 0 (recvB0@s0) waits for rank 1's sendB0@s1"));
    CHECK_THAT(err, Contains("rank 1, action 0 (recvF0@s1) waits for rank 0's sendF0@s0"));
  }
  SECTION("a duplicated forward") {
    const std::string err = validation_error(with_lists(
        good, {"F0@s0 sendF0@s0 F0@s0 F1@s0 sendF1@s0 recvB0@s0 B0@s0 recvB1@s0 B1@s0", rank1}));
    CHECK_THAT(err, Contains("rank 0, action 2 (F0@s0): runs twice (first at rank 0, action 0)"));
  }
  SECTION("a stage on the wrong rank") {
    const std::string err = validation_error(with_lists(good, {rank0 + " F0@s1", rank1}));
    CHECK_THAT(err, Contains("rank 0, action 8 (F0@s1): stage 1 runs on rank 1"));
  }
  SECTION("a receive nobody sends") {
    const std::string err = validation_error(
        with_lists(good, {"F0@s0 sendF0@s0 F1@s0 recvB0@s0 B0@s0 recvB1@s0 B1@s0", rank1}));
    CHECK_THAT(err, Contains("rank 1, action 4 (recvF1@s1): rank 0 never sends it (sendF1@s0)"));
  }
  SECTION("a transfer off the end of the pipeline") {
    const std::string err = validation_error(with_lists(good, {"recvF0@s0 " + rank0, rank1}));
    CHECK_THAT(err, Contains("rank 0, action 0 (recvF0@s0): stage 0 has no stage -1"));
  }
  SECTION("a missing weight gradient") {
    const Schedule zb = make_schedule(ScheduleKind::ZeroBubbleH1, 2, 2);
    std::string list = serialize(zb.actions[0]);
    list.erase(list.find(" W1@s0"), 6);
    const std::string err = validation_error(with_lists(zb, {list, serialize(zb.actions[1])}));
    CHECK_THAT(err, Contains("pipeline schedule zb_h1: rank 0: W1@s0 is missing"));
  }
  SECTION("a forward nobody runs") {
    const std::string err = validation_error(
        with_lists(good, {rank0, "recvF0@s1 F0@s1 B0@s1 sendB0@s1 recvF1@s1 B1@s1 sendB1@s1"}));
    CHECK_THAT(err,
               Contains("rank 1, action 5 (B1@s1): needs F1@s1 first, which rank 1 never runs"));
  }
}

// ---- Arguments --------------------------------------------------------------------------------

TEST_CASE("make_schedule names the bad argument and the fix", "[pipeline]") {
  CHECK_THROWS_WITH(parse_schedule_kind("1fb1"), Contains("unknown schedule kind '1fb1'") &&
                                                     Contains("did you mean '1f1b'?") &&
                                                     Contains("set pipeline.schedule"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::OneFOneB, 4, 3),
                    Contains("3 micro-batches for 4 pipeline ranks") &&
                        Contains("set pipeline.microbatches to at least 4"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::OneFOneB, 2, 4, 2),
                    Contains("chunks is 2") && Contains("set pipeline.chunks to 1"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::Interleaved1F1B, 2, 4, 1),
                    Contains("chunks is 1") && Contains("set pipeline.chunks to 2 or more"));
  CHECK_THROWS_AS(make_schedule(ScheduleKind::GPipe, 0, 4), vescale::Error);
  std::vector<std::string> names;
  for (ScheduleKind k : schedule_kinds()) {
    names.push_back(to_string(k));
    CHECK(parse_schedule_kind(names.back()) == k);
  }
  CHECK(names == std::vector<std::string>{"gpipe", "1f1b", "interleaved_1f1b", "zb_h1"});
}

// ---- Text form --------------------------------------------------------------------------------

TEST_CASE("parse_actions reads back what serialize writes", "[pipeline]") {
  CHECK(to_string(Action{Op::Forward, 1, 3}) == "F3@s1");
  CHECK(to_string(Action{Op::SendGrad, 1, 3}) == "sendB3@s1");
  CHECK(to_string(Action{Op::RecvActivation, 12, 40}) == "recvF40@s12");
  for (ScheduleKind kind : schedule_kinds())
    for (int p = 1; p <= 4; ++p) {
      const Schedule s = make_schedule(kind, p, p + 1, kind == ScheduleKind::Interleaved1F1B ? 3 : 1);
      for (const auto& list : s.actions) CHECK(parse_actions(serialize(list)) == list);
    }
  CHECK(parse_actions("  F0@s0\n  W1@s2  ") ==
        std::vector<Action>{{Op::Forward, 0, 0}, {Op::BackwardWeight, 2, 1}});
  CHECK(parse_actions("").empty());
}

TEST_CASE("parse_actions names the token it cannot read", "[pipeline]") {
  CHECK_THROWS_WITH(parse_actions("F0@s0 X3@s1"),
                    Contains("cannot read action 'X3@s1' (token 1)") && Contains("F3@s1"));
  for (const char* bad : {"F@s0", "F0s0", "F0@s", "F-1@s0", "sendX0@s0", "F0@s0x", "recv"})
    CHECK_THROWS_WITH(parse_actions(bad), Contains(std::string("'") + bad + "'"));
}
