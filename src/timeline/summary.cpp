#include "vescale/timeline/summary.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

namespace vescale::timeline {

namespace {

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

Intervals unite(Intervals v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& [a, b] : v) {
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second) {
      out.back().second = std::max(out.back().second, b);
    } else {
      out.emplace_back(a, b);
    }
  }
  return out;
}

// Both sorted and disjoint (unite's output).
Intervals intersect(const Intervals& x, const Intervals& y) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t a = std::max(x[i].first, y[j].first), b = std::min(x[i].second, y[j].second);
    if (a < b) out.emplace_back(a, b);
    (x[i].second < y[j].second) ? ++i : ++j;
  }
  return out;
}

int64_t length(const Intervals& v) {
  int64_t n = 0;
  for (const auto& [a, b] : v) n += b - a;
  return n;
}

double ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

bool is_comm(Kind k) { return k == Kind::Collective || k == Kind::Send || k == Kind::Recv; }

}  // namespace

Summary summarize(const Merged& m) {
  Summary out;
  for (const auto& r : m.ranks) {
    RankSummary rs;
    rs.rank = r.rank;
    rs.label = r.label;
    // Waits count on the thread that ran the steps (others' waits block no step).
    uint16_t main = 0;
    for (const auto& s : r.spans)
      if (s.kind == Kind::Step) main = s.thread;
    Intervals steps, waits, comm;
    std::map<std::string, std::pair<DimsShare, Intervals>> by_dims;  // the share, its spans
    for (const auto& s : r.spans) {
      if (s.kind == Kind::Step) steps.emplace_back(s.begin_ns, s.end_ns), ++rs.steps;
      if (s.kind == Kind::Wait && s.thread == main) waits.emplace_back(s.begin_ns, s.end_ns);
      if (is_comm(s.kind)) {
        comm.emplace_back(s.begin_ns, s.end_ns);
        const std::string dims = r.dims(s);
        auto& [d, spans] = by_dims[dims];
        d.dims = dims;
        ++d.collectives;
        d.bytes += s.bytes;
        spans.emplace_back(s.begin_ns, s.end_ns);
      }
    }
    steps = unite(std::move(steps));
    const Intervals waiting = intersect(unite(std::move(waits)), steps);
    auto split = [&](Intervals c, double& overlapped, double& exposed) {
      const Intervals in_steps = intersect(unite(std::move(c)), steps);
      const int64_t e = length(intersect(in_steps, waiting));
      exposed = ms(e);
      overlapped = ms(length(in_steps) - e);
      return length(in_steps);
    };
    const int64_t step_ns = length(steps);
    const int64_t comm_ns = split(std::move(comm), rs.overlapped_ms, rs.exposed_ms);
    rs.step_ms = ms(step_ns);
    rs.compute_ms = ms(step_ns - comm_ns);
    for (auto& [dims, entry] : by_dims) {
      auto& [d, spans] = entry;
      // Dim sets that talked only outside the steps (the stop agreement) are left out.
      if (split(std::move(spans), d.overlapped_ms, d.exposed_ms) > 0) rs.dims.push_back(d);
    }
    out.ranks.push_back(std::move(rs));
  }
  if (out.ranks.empty()) return out;
  auto per_step = [](const RankSummary& r, double total) {
    return r.steps > 0 ? total / static_cast<double>(r.steps) : 0.0;
  };
  size_t slow = 0, fast = 0, most = 0, least = 0;
  for (size_t i = 0; i < out.ranks.size(); ++i) {
    const auto& r = out.ranks[i];
    if (per_step(r, r.step_ms) > per_step(out.ranks[slow], out.ranks[slow].step_ms)) slow = i;
    if (per_step(r, r.step_ms) < per_step(out.ranks[fast], out.ranks[fast].step_ms)) fast = i;
    if (per_step(r, r.compute_ms) > per_step(out.ranks[most], out.ranks[most].compute_ms)) most = i;
    if (per_step(r, r.compute_ms) < per_step(out.ranks[least], out.ranks[least].compute_ms))
      least = i;
  }
  const auto& R = out.ranks;
  out.slowest_rank = R[slow].rank, out.fastest_rank = R[fast].rank;
  out.step_gap_ms = per_step(R[slow], R[slow].step_ms) - per_step(R[fast], R[fast].step_ms);
  out.straggler_rank = R[most].rank, out.least_compute_rank = R[least].rank;
  out.compute_gap_ms =
      per_step(R[most], R[most].compute_ms) - per_step(R[least], R[least].compute_ms);
  out.steps = R[0].steps;
  return out;
}

std::string Summary::to_text() const {
  std::string out;
  char line[512];
  auto pct = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  std::snprintf(line, sizeof(line), "%-28s %9s %8s %10s %8s", "rank", "ms/step", "compute",
                "overlapped", "exposed");
  out += line;
  for (const auto& d : ranks.empty() ? std::vector<DimsShare>{} : ranks[0].dims)
    out += "  | " + d.dims + " ovl/exp";
  out += "\n";
  for (const auto& r : ranks) {
    const double steps = r.steps > 0 ? static_cast<double>(r.steps) : 1.0;
    std::snprintf(line, sizeof(line), "%-28s %9.2f %7.1f%% %9.1f%% %7.1f%%", r.label.c_str(),
                  r.step_ms / steps, pct(r.compute_ms, r.step_ms), pct(r.overlapped_ms, r.step_ms),
                  pct(r.exposed_ms, r.step_ms));
    out += line;
    for (const auto& d : r.dims) {
      std::snprintf(line, sizeof(line), "  | %s %.1f%%/%.1f%%", d.dims.c_str(),
                    pct(d.overlapped_ms, r.step_ms), pct(d.exposed_ms, r.step_ms));
      out += line;
    }
    out += "\n";
  }
  if (!ranks.empty()) {
    std::snprintf(line, sizeof(line),
                  "straggler: rank %d computes %.2f ms/step more than rank %d (the others wait "
                  "for it); step time: slowest rank %d, fastest rank %d, gap %.2f ms/step",
                  straggler_rank, compute_gap_ms, least_compute_rank, slowest_rank, fastest_rank,
                  step_gap_ms);
    out += line;
  }
  return out;
}

std::string Summary::to_json() const {
  nlohmann::ordered_json rs = nlohmann::ordered_json::array();
  for (const auto& r : ranks) {
    nlohmann::ordered_json dims = nlohmann::ordered_json::object();
    for (const auto& d : r.dims) {
      dims[d.dims] = {{"overlapped_ms", d.overlapped_ms},
                      {"exposed_ms", d.exposed_ms},
                      {"overlapped_share", r.step_ms > 0 ? d.overlapped_ms / r.step_ms : 0.0},
                      {"exposed_share", r.step_ms > 0 ? d.exposed_ms / r.step_ms : 0.0},
                      {"collectives", d.collectives},
                      {"bytes", d.bytes}};
    }
    const double w = r.step_ms > 0 ? r.step_ms : 1.0;
    rs.push_back({{"rank", r.rank},
                  {"label", r.label},
                  {"steps", r.steps},
                  {"step_ms", r.step_ms},
                  {"compute_ms", r.compute_ms},
                  {"overlapped_ms", r.overlapped_ms},
                  {"exposed_ms", r.exposed_ms},
                  {"compute_share", r.compute_ms / w},
                  {"overlapped_share", r.overlapped_ms / w},
                  {"exposed_share", r.exposed_ms / w},
                  {"dims", std::move(dims)}});
  }
  nlohmann::ordered_json j{{"steps", steps},
                           {"ranks", std::move(rs)},
                           {"straggler",
                            {{"rank", straggler_rank},
                             {"compute_gap_ms_per_step", compute_gap_ms},
                             {"least_compute_rank", least_compute_rank},
                             {"slowest_rank", slowest_rank},
                             {"fastest_rank", fastest_rank},
                             {"step_gap_ms_per_step", step_gap_ms}}}};
  return j.dump();
}

}  // namespace vescale::timeline
