// Pipeline schedules as data: the generators, the validator and the simulator
// (vescale/parallel/pipeline/schedule.h). Each generator writes only the compute order; one
// shared pass adds the transfers, and one replay both proves the lists runnable and times them.
#include "vescale/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <optional>
#include <sstream>

#include "vescale/common/check.h"

namespace vescale::parallel::pipeline {

namespace {

constexpr int kOps = 8;

bool is_compute(Op op) { return op <= Op::BackwardWeight; }
bool is_send(Op op) { return op == Op::SendActivation || op == Op::SendGrad; }
bool is_recv(Op op) { return op == Op::RecvActivation || op == Op::RecvGrad; }
bool is_grad_compute(Op op) { return op == Op::Backward || op == Op::BackwardInput; }

// Each op's text, in enum order (no name is a prefix of another).
const char* const kOpNames[kOps] = {"F", "B", "I", "W", "sendF", "recvF", "sendB", "recvB"};

Action act(Op op, int stage, int mb) { return Action{op, stage, mb}; }

// The stage on the other end of a transfer.
int peer_stage(const Action& a) {
  switch (a.op) {
    case Op::SendActivation:
    case Op::RecvGrad:
      return a.stage + 1;
    case Op::RecvActivation:
    case Op::SendGrad:
      return a.stage - 1;
    default:
      return a.stage;
  }
}

// The send a receive pairs with, and the receive a send pairs with.
Action matching_send(const Action& recv) {
  const Op op = recv.op == Op::RecvActivation ? Op::SendActivation : Op::SendGrad;
  return act(op, peer_stage(recv), recv.microbatch);
}
Action matching_recv(const Action& send) {
  const Op op = send.op == Op::SendActivation ? Op::RecvActivation : Op::RecvGrad;
  return act(op, peer_stage(send), send.microbatch);
}

// ---- Compute orders ------------------------------------------------------------------------

using Order = std::vector<Action>;

Order gpipe_order(int rank, int mbs) {
  Order out;
  for (int m = 0; m < mbs; ++m) out.push_back(act(Op::Forward, rank, m));
  for (int m = 0; m < mbs; ++m) out.push_back(act(Op::Backward, rank, m));
  return out;
}

// 1F1B; with `split` (zb_h1), each B becomes I, and rank r keeps up to r Ws queued: the input
// gradient goes up the pipeline without waiting for the weight gradient, the queued Ws fill the
// cool-down, and every rank peaks at p micro-batches in flight, 1F1B's peak on rank 0.
Order one_f_one_b_order(int ranks, int rank, int mbs, bool split) {
  const int warmup = std::min(ranks - 1 - rank, mbs);
  const size_t keep = static_cast<size_t>(rank);
  Order out;
  std::deque<int> queued_w;
  auto run_oldest_w = [&] {
    out.push_back(act(Op::BackwardWeight, rank, queued_w.front()));
    queued_w.pop_front();
  };
  auto backward = [&](int m, bool cooldown) {
    if (!split) {
      out.push_back(act(Op::Backward, rank, m));
      return;
    }
    out.push_back(act(Op::BackwardInput, rank, m));
    queued_w.push_back(m);
    if (cooldown || queued_w.size() > keep) run_oldest_w();
  };
  for (int m = 0; m < warmup; ++m) out.push_back(act(Op::Forward, rank, m));
  for (int i = 0; i + warmup < mbs; ++i) {
    out.push_back(act(Op::Forward, rank, warmup + i));
    backward(i, /*cooldown=*/false);
  }
  for (int m = mbs - warmup; m < mbs; ++m) backward(m, /*cooldown=*/true);
  while (!queued_w.empty()) run_oldest_w();
  return out;
}

// Round sizes: max(1, M / p) rounds, as even as possible, the earlier ones larger (each >= p).
std::vector<int> round_sizes(int ranks, int mbs) {
  const int rounds = std::max(1, mbs / ranks);
  std::vector<int> sizes(rounds, mbs / rounds);
  for (int k = 0; k < mbs % rounds; ++k) ++sizes[k];
  return sizes;
}

// Interleaved 1F1B (Megatron's virtual pipeline): forwards round by round, chunk by chunk;
// backwards the same with the chunks reversed. The warm-up covers the first round's forwards
// on every chunk but the last, plus two per later rank (the forward out to it and the gradient
// back), so that the first backward's gradient is on its way when the warm-up ends.
Order interleaved_order(int ranks, int rank, int mbs, int chunks) {
  const std::vector<int> rounds = round_sizes(ranks, mbs);
  Order fwd, bwd;
  int first = 0;
  for (int size : rounds) {
    for (int c = 0; c < chunks; ++c)
      for (int m = first; m < first + size; ++m)
        fwd.push_back(act(Op::Forward, c * ranks + rank, m));
    for (int c = chunks - 1; c >= 0; --c)
      for (int m = first; m < first + size; ++m)
        bwd.push_back(act(Op::Backward, c * ranks + rank, m));
    first += size;
  }
  const int total = static_cast<int>(fwd.size());
  const int warmup = std::min((chunks - 1) * rounds[0] + 2 * (ranks - 1 - rank), total);
  Order out(fwd.begin(), fwd.begin() + warmup);
  for (int i = 0; i + warmup < total; ++i) {
    out.push_back(fwd[warmup + i]);
    out.push_back(bwd[i]);
  }
  out.insert(out.end(), bwd.end() - warmup, bwd.end());
  return out;
}

// The shared pass: a receive right before the compute that reads it, a send right after the
// compute that made it; nothing between stages on the same rank.
std::vector<Action> with_transfers(const Schedule& s, const Order& compute) {
  auto crosses = [&](int from, int to) {
    return to >= 0 && to < s.stages && s.stage_rank[from] != s.stage_rank[to];
  };
  std::vector<Action> out;
  for (const Action& a : compute) {
    const int st = a.stage, m = a.microbatch;
    const bool fwd = a.op == Op::Forward, grad = is_grad_compute(a.op);
    if (fwd && crosses(st, st - 1)) out.push_back(act(Op::RecvActivation, st, m));
    if (grad && crosses(st, st + 1)) out.push_back(act(Op::RecvGrad, st, m));
    out.push_back(a);
    if (fwd && crosses(st, st + 1)) out.push_back(act(Op::SendActivation, st, m));
    if (grad && crosses(st, st - 1)) out.push_back(act(Op::SendGrad, st, m));
  }
  return out;
}

// NCCL pairs one rank's sends to a peer with the peer's receives in order. Where the peer
// receives an older tensor first (only interleaved_1f1b on 2 ranks with uneven rounds, where
// activations and gradients share each direction), a send waits until that one is sent. The
// peer cannot use it sooner, so the wait adds no deadlock.
void order_sends_as_received(Schedule& s) {
  const size_t p = static_cast<size_t>(s.ranks);
  std::vector<std::vector<Action>> wanted(p * p);  // [from * p + to]: sends in receive order
  for (int to = 0; to < s.ranks; ++to)
    for (const Action& a : s.actions[to])
      if (is_recv(a.op)) wanted[s.stage_rank[peer_stage(a)] * p + to].push_back(matching_send(a));
  for (int from = 0; from < s.ranks; ++from) {
    std::vector<Action> out, ready;
    std::vector<size_t> next(p, 0);
    for (const Action& a : s.actions[from]) {
      if (!is_send(a.op)) {
        out.push_back(a);
        continue;
      }
      const size_t to = s.stage_rank[peer_stage(a)];
      ready.push_back(a);
      auto& want = wanted[from * p + to];
      while (next[to] < want.size()) {
        const auto it = std::find(ready.begin(), ready.end(), want[next[to]]);
        if (it == ready.end()) break;
        out.push_back(*it);
        ready.erase(it);
        ++next[to];
      }
    }
    out.insert(out.end(), ready.begin(), ready.end());  // none when every send is received
    s.actions[from] = std::move(out);
  }
}

// ---- Replay --------------------------------------------------------------------------------

// Where each action is: its rank and index, by (op, stage, micro-batch). Unique once checked.
struct Index {
  int stages = 0, mbs = 0;
  std::vector<int> rank, pos;

  Index(int stages_, int mbs_) : stages(stages_), mbs(mbs_) {
    rank.assign(static_cast<size_t>(kOps) * stages * mbs, -1);
    pos = rank;
  }
  bool in_range(const Action& a) const {
    return a.stage >= 0 && a.stage < stages && a.microbatch >= 0 && a.microbatch < mbs;
  }
  size_t key(const Action& a) const {
    return (static_cast<size_t>(a.op) * stages + a.stage) * mbs + a.microbatch;
  }
  bool has(const Action& a) const { return in_range(a) && rank[key(a)] >= 0; }
};

std::string where(const Schedule& s, int rank, size_t k) {
  return detail::cat("pipeline schedule ", to_string(s.kind), ": rank ", rank, ", action ", k, " (",
                     to_string(s.actions[rank][k]), ")");
}

[[noreturn]] void fail_at(const Schedule& s, int rank, size_t k, const std::string& what) {
  VESCALE_FAIL(where(s, rank, k), ": ", what);
}

// What one action may be, on its own: in range, on its stage's rank, a transfer that crosses.
void check_action(const Schedule& s, int rank, size_t k) {
  const Action& a = s.actions[rank][k];
  if (a.stage < 0 || a.stage >= s.stages)
    fail_at(s, rank, k, detail::cat("stage ", a.stage, " is out of range (", s.stages, " stages)"));
  if (a.microbatch < 0 || a.microbatch >= s.microbatches)
    fail_at(s, rank, k,
            detail::cat("micro-batch ", a.microbatch, " is out of range (", s.microbatches,
                        " micro-batches)"));
  if (s.stage_rank[a.stage] != rank)
    fail_at(
        s, rank, k,
        detail::cat("stage ", a.stage, " runs on rank ", s.stage_rank[a.stage], ", not this one"));
  if (is_compute(a.op)) return;
  const int peer = peer_stage(a);
  if (peer < 0 || peer >= s.stages)
    fail_at(s, rank, k, detail::cat("stage ", a.stage, " has no stage ", peer, " to talk to"));
  if (s.stage_rank[peer] == rank)
    fail_at(s, rank, k,
            detail::cat("stages ", a.stage, " and ", peer, " are both on rank ", rank,
                        ": pass the tensor in memory, without a transfer"));
}

// Every action once, and every receive with a send somewhere to wait for.
Index index_actions(const Schedule& s) {
  Index idx(s.stages, s.microbatches);
  for (int r = 0; r < s.ranks; ++r) {
    for (size_t k = 0; k < s.actions[r].size(); ++k) {
      check_action(s, r, k);
      const size_t key = idx.key(s.actions[r][k]);
      if (idx.rank[key] >= 0)
        fail_at(s, r, k,
                detail::cat("runs twice (first at rank ", idx.rank[key], ", action ", idx.pos[key],
                            ")"));
      idx.rank[key] = r;
      idx.pos[key] = static_cast<int>(k);
    }
  }
  for (int r = 0; r < s.ranks; ++r)
    for (size_t k = 0; k < s.actions[r].size(); ++k) {
      const Action& a = s.actions[r][k];
      if (is_recv(a.op) && !idx.has(matching_send(a)))
        fail_at(s, r, k,
                detail::cat("rank ", s.stage_rank[peer_stage(a)], " never sends it (",
                            to_string(matching_send(a)), ")"));
    }
  return idx;
}

// The local actions `a` needs done first (any one of each group): its input, its output
// gradient, its forward, its I; a send needs the compute that made its tensor.
std::vector<std::vector<Action>> prerequisites(const Schedule& s, const Action& a) {
  const int st = a.stage, m = a.microbatch, r = s.stage_rank[st];
  auto local = [&](int other) {
    return other >= 0 && other < s.stages && s.stage_rank[other] == r;
  };
  auto backward_of = [&](int stage) {
    return std::vector<Action>{act(Op::Backward, stage, m), act(Op::BackwardInput, stage, m)};
  };
  std::vector<std::vector<Action>> need;
  switch (a.op) {
    case Op::Forward:
      if (st > 0)
        need.push_back(
            {local(st - 1) ? act(Op::Forward, st - 1, m) : act(Op::RecvActivation, st, m)});
      break;
    case Op::Backward:
    case Op::BackwardInput:
      need.push_back({act(Op::Forward, st, m)});
      if (st + 1 < s.stages)
        need.push_back(local(st + 1) ? backward_of(st + 1)
                                     : std::vector<Action>{act(Op::RecvGrad, st, m)});
      break;
    case Op::BackwardWeight:
      need.push_back({act(Op::BackwardInput, st, m)});
      break;
    case Op::SendActivation:
      need.push_back({act(Op::Forward, st, m)});
      break;
    case Op::SendGrad:
      need.push_back(backward_of(st));
      break;
    default:
      break;
  }
  return need;
}

double cost_of(Op op, const ActionCosts& c) {
  switch (op) {
    case Op::Forward:
      return c.forward;
    case Op::Backward:
      return c.backward_input + c.backward_weight;
    case Op::BackwardInput:
      return c.backward_input;
    case Op::BackwardWeight:
      return c.backward_weight;
    default:
      return 0;
  }
}

struct Replay {
  const Schedule& s;
  const ActionCosts& costs;
  const Index& idx;
  std::vector<char> done;
  std::vector<double> send_start;
  std::vector<size_t> cursor;
  std::vector<double> clock;
  std::vector<int> in_flight, awaiting_weight;
  Simulation sim;

  Replay(const Schedule& s_, const ActionCosts& c, const Index& i)
      : s(s_),
        costs(c),
        idx(i),
        done(i.rank.size(), 0),
        send_start(i.rank.size(), 0),
        cursor(s_.ranks, 0),
        clock(s_.ranks, 0),
        in_flight(s_.ranks, 0),
        awaiting_weight(s_.ranks, 0) {
    sim.busy.assign(s.ranks, 0);
    sim.peak_in_flight.assign(s.ranks, 0);
    sim.peak_awaiting_weight.assign(s.ranks, 0);
    sim.timeline.resize(s.ranks);
  }

  bool is_done(const Action& a) const { return idx.in_range(a) && done[idx.key(a)]; }

  // A missing local prerequisite is an ordering error: it can only come later, or never.
  void check_ready(int r, size_t k) {
    for (const auto& group : prerequisites(s, s.actions[r][k])) {
      if (std::any_of(group.begin(), group.end(), [&](const Action& a) { return is_done(a); }))
        continue;
      const Action* later = nullptr;
      for (const Action& a : group)
        if (idx.has(a) && idx.rank[idx.key(a)] == r) later = &a;
      if (later)
        fail_at(s, r, k,
                detail::cat("needs ", to_string(*later), " first, which rank ", r,
                            " runs later (action ", idx.pos[idx.key(*later)], ")"));
      fail_at(
          s, r, k,
          detail::cat("needs ", to_string(group.front()), " first, which rank ", r, " never runs"));
    }
  }

  // Runs rank r's next action if it can; a receive waits for its send to be posted.
  bool step(int r) {
    const size_t k = cursor[r];
    const Action& a = s.actions[r][k];
    double start = clock[r], end = start;
    if (is_recv(a.op)) {
      const size_t send = idx.key(matching_send(a));
      if (!done[send]) return false;
      end = std::max(start, send_start[send] + costs.p2p);
    } else {
      check_ready(r, k);
      end = start + cost_of(a.op, costs) * costs.weight(a.stage);
      if (is_send(a.op)) send_start[idx.key(a)] = start;
      if (is_compute(a.op)) sim.busy[r] += end - start;
    }
    count_in_flight(r, a.op);
    done[idx.key(a)] = 1;
    clock[r] = end;
    sim.makespan = std::max(sim.makespan, end);
    sim.timeline[r].push_back(TimedAction{a, start, end});
    ++cursor[r];
    return true;
  }

  void count_in_flight(int r, Op op) {
    if (op == Op::Forward) sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], ++in_flight[r]);
    if (op == Op::Backward || op == Op::BackwardWeight) --in_flight[r];
    if (op == Op::BackwardInput)
      sim.peak_awaiting_weight[r] = std::max(sim.peak_awaiting_weight[r], ++awaiting_weight[r]);
    if (op == Op::BackwardWeight) --awaiting_weight[r];
  }

  void run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int r = 0; r < s.ranks; ++r)
        while (cursor[r] < s.actions[r].size() && step(r)) moved = true;
    }
    std::string stuck;
    for (int r = 0; r < s.ranks; ++r) {
      if (cursor[r] == s.actions[r].size()) continue;
      const Action send = matching_send(s.actions[r][cursor[r]]);
      const int peer = idx.rank[idx.key(send)];
      stuck += detail::cat(stuck.empty() ? "" : "; ", "rank ", r, ", action ", cursor[r], " (",
                           to_string(s.actions[r][cursor[r]]), ") waits for rank ", peer, "'s ",
                           to_string(send), " (its action ", idx.pos[idx.key(send)], ")");
    }
    VESCALE_CHECK(stuck.empty(), "pipeline schedule ", to_string(s.kind), ": deadlock: ", stuck,
                  "; receives block, so post the send that each waits for earlier");
  }
};

// After the replay: each (stage, micro-batch) has its F and one backward, each send its receive.
void check_complete(const Schedule& s, const Index& idx) {
  for (int st = 0; st < s.stages; ++st)
    for (int m = 0; m < s.microbatches; ++m) {
      const int r = s.stage_rank[st];
      auto has = [&](Op op) { return idx.has(act(op, st, m)); };
      auto missing = [&](const std::string& what) {
        VESCALE_FAIL("pipeline schedule ", to_string(s.kind), ": rank ", r, ": ", what,
                     " is missing (each stage runs every micro-batch's F once, and B or I and W "
                     "once)");
      };
      if (!has(Op::Forward)) missing(to_string(act(Op::Forward, st, m)));
      if (has(Op::Backward) && (has(Op::BackwardInput) || has(Op::BackwardWeight))) {
        const Action b = act(Op::Backward, st, m);
        fail_at(s, r, idx.pos[idx.key(b)],
                "runs beside an I/W of the same micro-batch: run B, or I and W");
      }
      if (has(Op::BackwardInput) && !has(Op::BackwardWeight))
        missing(to_string(act(Op::BackwardWeight, st, m)));
      if (!has(Op::Backward) && !has(Op::BackwardInput))
        missing(detail::cat(to_string(act(Op::Backward, st, m)), " (or ",
                            to_string(act(Op::BackwardInput, st, m)), " and ",
                            to_string(act(Op::BackwardWeight, st, m)), ")"));
    }
  for (int r = 0; r < s.ranks; ++r)
    for (size_t k = 0; k < s.actions[r].size(); ++k) {
      const Action& a = s.actions[r][k];
      if (is_send(a.op) && !idx.has(matching_recv(a)))
        fail_at(s, r, k,
                detail::cat("rank ", s.stage_rank[peer_stage(a)], " never receives it (",
                            to_string(matching_recv(a)), ")"));
    }
}

// NCCL pairs the sends from one rank to another with the peer's receives in order, whatever
// the tensor: the n-th send must be the one the peer's n-th receive expects.
void check_fifo(const Schedule& s) {
  const size_t p = static_cast<size_t>(s.ranks);
  std::vector<std::vector<size_t>> sends(p * p), recvs(p * p);  // [from * p + to] -> indices
  for (int r = 0; r < s.ranks; ++r)
    for (size_t k = 0; k < s.actions[r].size(); ++k) {
      const Action& a = s.actions[r][k];
      const size_t peer = s.stage_rank[peer_stage(a)];
      if (is_send(a.op)) sends[r * p + peer].push_back(k);
      if (is_recv(a.op)) recvs[peer * p + r].push_back(k);
    }
  for (size_t from = 0; from < p; ++from)
    for (size_t to = 0; to < p; ++to) {
      const auto& out = sends[from * p + to];
      const auto& in = recvs[from * p + to];
      for (size_t n = 0; n < out.size() && n < in.size(); ++n) {
        const Action& send = s.actions[from][out[n]];
        const Action& recv = s.actions[to][in[n]];
        if (matching_recv(send) == recv) continue;
        fail_at(s, static_cast<int>(from), out[n],
                detail::cat("is send ", n, " to rank ", to, ", but rank ", to, "'s receive ", n,
                            " from rank ", from, " is ", to_string(recv), " (its action ", in[n],
                            "), which waits for ", to_string(matching_send(recv)),
                            "; NCCL pairs them in order, so send in the order the peer receives"));
      }
    }
}

void check_shape(const Schedule& s) {
  VESCALE_CHECK(s.ranks >= 1 && s.stages >= s.ranks && s.microbatches >= 1, "pipeline schedule ",
                to_string(s.kind), ": ", s.ranks, " ranks, ", s.stages, " stages, ", s.microbatches,
                " micro-batches; build it with make_schedule");
  VESCALE_CHECK(static_cast<int>(s.stage_rank.size()) == s.stages, "pipeline schedule ", to_string(s.kind),
                ": stage_rank has ", s.stage_rank.size(), " entries for ", s.stages, " stages");
  VESCALE_CHECK(static_cast<int>(s.actions.size()) == s.ranks, "pipeline schedule ", to_string(s.kind), ": ",
                s.actions.size(), " action lists for ", s.ranks, " ranks");
  for (int st = 0; st < s.stages; ++st)
    VESCALE_CHECK(s.stage_rank[st] >= 0 && s.stage_rank[st] < s.ranks, "pipeline schedule ", to_string(s.kind),
                  ": stage ", st, " is on rank ", s.stage_rank[st], " of ", s.ranks);
}

// validate() and simulate(): the checks, with the replay's times.
Simulation checked_replay(const Schedule& s, const ActionCosts& costs) {
  check_shape(s);
  const Index idx = index_actions(s);
  Replay replay(s, costs, idx);
  replay.run();
  check_complete(s, idx);
  check_fifo(s);
  const double total = s.ranks * replay.sim.makespan;
  double busy = 0;
  for (double b : replay.sim.busy) busy += b;
  replay.sim.bubble_fraction = total > 0 ? 1 - busy / total : 0;
  return std::move(replay.sim);
}

// Reads a non-negative decimal integer from `text` at `i`; false if there is none.
bool read_int(const std::string& text, size_t& i, int& out) {
  const size_t begin = i;
  long long v = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && i - begin < 9)
    v = v * 10 + (text[i++] - '0');
  out = static_cast<int>(v);
  return i > begin;
}

std::optional<Action> parse_token(const std::string& tok) {
  for (int op = 0; op < kOps; ++op) {
    const std::string name = kOpNames[op];
    if (tok.compare(0, name.size(), name) != 0) continue;
    Action a{static_cast<Op>(op), 0, 0};
    size_t i = name.size();
    if (!read_int(tok, i, a.microbatch) || tok.compare(i, 2, "@s") != 0) return std::nullopt;
    i += 2;
    if (!read_int(tok, i, a.stage) || i != tok.size()) return std::nullopt;
    return a;
  }
  return std::nullopt;
}

std::string cell_label(const Schedule& s, const Action& a) {
  std::string label = kOpNames[static_cast<int>(a.op)] + std::to_string(a.microbatch);
  if (s.chunks() > 1) label += "." + std::to_string(a.stage / s.ranks);
  return label;
}

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * f);
  return buf;
}

}  // namespace

// ---- Public API ----------------------------------------------------------------------------

std::string to_string(const Action& a) {
  return kOpNames[static_cast<int>(a.op)] + std::to_string(a.microbatch) + "@s" +
         std::to_string(a.stage);
}

std::string serialize(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) out += (out.empty() ? "" : " ") + to_string(a);
  return out;
}

std::vector<Action> parse_actions(const std::string& text) {
  std::istringstream in(text);
  std::vector<Action> out;
  std::string tok;
  while (in >> tok) {
    const auto a = parse_token(tok);
    VESCALE_CHECK(a, "pipeline: cannot read action '", tok, "' (token ", out.size(),
                  "); write F3@s1, B3@s1, I3@s1, W3@s1, sendF3@s1, recvF3@s1, sendB3@s1 or "
                  "recvB3@s1 (op, micro-batch, @s, stage)");
    out.push_back(*a);
  }
  return out;
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> out;
  for (int st = 0; st < static_cast<int>(stage_rank.size()); ++st)
    if (stage_rank[st] == rank) out.push_back(st);
  return out;
}

bool Schedule::splits_backward() const { return kind == ScheduleKind::ZeroBubbleH1; }

Schedule make_schedule(ScheduleKind kind, int ranks, int microbatches, int chunks) {
  VESCALE_CHECK(ranks >= 1, "pipeline: ", ranks,
                " pipeline ranks; the pipeline mesh dim needs "
                "size 1 or more");
  VESCALE_CHECK(microbatches >= ranks, "pipeline: ", microbatches, " micro-batches for ", ranks,
                " pipeline ranks; set pipeline.microbatches to at least ", ranks);
  const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
  VESCALE_CHECK(!interleaved || chunks >= 2, "pipeline schedule ", to_string(kind), ": chunks is ", chunks,
                "; interleaving needs at least 2 per rank, so set pipeline.chunks to 2 or more, "
                "or pipeline.schedule to 1f1b");
  VESCALE_CHECK(interleaved || chunks == 1, "pipeline schedule ", to_string(kind), ": chunks is ", chunks,
                "; only interleaved_1f1b runs more than one per rank, so set pipeline.chunks to "
                "1, or pipeline.schedule to interleaved_1f1b");

  Schedule s;
  s.kind = kind;
  s.ranks = ranks;
  s.stages = ranks * chunks;
  s.microbatches = microbatches;
  for (int st = 0; st < s.stages; ++st) s.stage_rank.push_back(st % ranks);
  for (int r = 0; r < ranks; ++r) {
    Order compute = kind == ScheduleKind::GPipe ? gpipe_order(r, microbatches)
                    : interleaved   ? interleaved_order(ranks, r, microbatches, chunks)
                                    : one_f_one_b_order(ranks, r, microbatches, s.splits_backward());
    s.actions.push_back(with_transfers(s, compute));
  }
  order_sends_as_received(s);
  return s;
}

void validate(const Schedule& schedule) { checked_replay(schedule, ActionCosts{}); }

Simulation simulate(const Schedule& schedule, const ActionCosts& costs) {
  return checked_replay(schedule, costs);
}

double textbook_bubble(int ranks, int microbatches) {
  return static_cast<double>(ranks - 1) / (microbatches + ranks - 1);
}

std::string render_timeline(const Schedule& s, const Simulation& sim) {
  std::ostringstream out;
  out << "pipeline schedule " << to_string(s.kind) << ": " << s.ranks << " ranks, " << s.stages << " stages ("
      << s.chunks() << " per rank), " << s.microbatches << " micro-batches, makespan "
      << sim.makespan << "\n";
  // Columns per time unit: the shortest cell fits its label and a space, within ~150 chars a
  // line; a whole number of columns per shortest cell where that fits, so that cells line up.
  size_t label_width = 1;
  double shortest = 0;
  for (const auto& rank : sim.timeline)
    for (const TimedAction& t : rank) {
      if (!is_compute(t.action.op) || t.end <= t.start) continue;
      label_width = std::max(label_width, cell_label(s, t.action).size());
      shortest = shortest > 0 ? std::min(shortest, t.end - t.start) : t.end - t.start;
    }
  const double max_cols = 140;
  double scale = 1;
  if (shortest > 0 && sim.makespan > 0) {
    double per_shortest = std::min<double>(label_width + 1, max_cols * shortest / sim.makespan);
    if (per_shortest >= 1) per_shortest = std::floor(per_shortest);
    scale = per_shortest / shortest;
  }
  const auto col = [&](double t) { return static_cast<size_t>(std::lround(t * scale)); };
  for (size_t r = 0; r < sim.timeline.size(); ++r) {
    std::string line(col(sim.makespan), '.');
    for (const TimedAction& t : sim.timeline[r]) {
      if (!is_compute(t.action.op)) continue;
      const size_t c0 = col(t.start), c1 = std::min(col(t.end), line.size());
      // The label when it fits, else the op letter and dashes; spaces pad it to the cost.
      std::string label = cell_label(s, t.action);
      if (c1 <= c0) continue;
      if (label.size() > c1 - c0) label = label.substr(0, 1) + std::string(c1 - c0 - 1, '-');
      for (size_t c = c0; c < c1; ++c) line[c] = c - c0 < label.size() ? label[c - c0] : ' ';
    }
    out << "rank " << r << " |" << line << "|\n";
  }
  char unit[64];
  std::snprintf(unit, sizeof unit, "%.3g", 1 / scale);
  out << "(1 column = " << unit << " time units; '.' idle; \"F-\" a cell too short for its label"
      << (s.chunks() > 1 ? "; F3.1 micro-batch 3 on chunk 1" : "") << ")\n";
  out << "bubble " << percent(sim.bubble_fraction) << " simulated, "
      << percent(textbook_bubble(s.ranks, s.microbatches))
      << " textbook (p-1)/(m+p-1) for GPipe/1F1B\n";
  out << "peak in-flight micro-batch-stages per rank:";
  for (int peak : sim.peak_in_flight) out << " " << peak;
  out << "\n";
  return out.str();
}

}  // namespace vescale::parallel::pipeline
