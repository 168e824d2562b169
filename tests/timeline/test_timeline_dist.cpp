// The merged timeline of real multi-rank runs: a DP x TP LLaMA on 4 ranks whose clocks are
// skewed on purpose and one of which sleeps in every step, and a 2-stage pipeline. Checked
// from the written trace alone: it parses, each thread's spans nest, every collective appears
// once on each member of its group under one number, the recovered clock offsets undo the
// skews within their stated error, matching collectives overlap in time once aligned, the
// summary's shares add up to the step (and equal a naive recount from the spans), and the
// sleeping rank is named the straggler.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/train_util.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/mesh/device_mesh.h"
#include "vescale/timeline/recorder.h"
#include "vescale/train/trainer.h"

using namespace vescale;
using namespace vescale::train;
using nlohmann::json;

namespace {

std::string scratch(const std::string& name) {
  // One folder for every rank: rank 0's pid, shared over the store.
  const auto pid = dist::all_gather_int64({static_cast<int64_t>(::getpid())}).front();
  return "/tmp/vescale_timeline_" + std::to_string(pid) + "_" + name;
}

Config tiny_llama(const std::vector<std::string>& extra) {
  std::vector<std::string> o{"train.batch_size=2",   "train.seq_len=16",   "train.steps=3",
                             "train.warmup_steps=1", "model.dim=32",       "model.n_layers=2",
                             "model.n_heads=4",      "model.n_kv_heads=2", "model.ffn_dim=64",
                             "model.max_seq_len=16", "train.eval_every=0", "train.log_every=100"};
  o.insert(o.end(), extra.begin(), extra.end());
  return Config::from_file(testing::repo_file("configs/llama_tiny.json"), o);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);  // throws (fails the test) on invalid JSON
}

struct X {
  int pid, tid;
  double ts, end;
  std::string name, cat;
  json args;
};

std::vector<X> complete_events(const json& trace) {
  std::vector<X> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    out.push_back({e["pid"], e["tid"], e["ts"], e["ts"].get<double>() + e["dur"].get<double>(),
                   e["name"], e["cat"], e["args"]});
  }
  return out;
}

// On every (process, thread), each span either lies inside the one still open or after it.
void check_nesting(const std::vector<X>& xs) {
  std::map<std::pair<int, int>, std::vector<const X*>> lanes;
  for (const auto& x : xs) lanes[{x.pid, x.tid}].push_back(&x);
  for (auto& [lane, v] : lanes) {
    std::stable_sort(v.begin(), v.end(), [](const X* a, const X* b) {
      return a->ts != b->ts ? a->ts < b->ts : a->end > b->end;
    });
    std::vector<const X*> open;
    for (const X* x : v) {
      while (!open.empty() && open.back()->end <= x->ts) open.pop_back();
      if (!open.empty()) {
        INFO("rank " << lane.first << " thread " << lane.second << ": '" << x->name << "' ["
                     << x->ts << ", " << x->end << "] crosses '" << open.back()->name << "' ["
                     << open.back()->ts << ", " << open.back()->end << "]");
        CHECK(x->end <= open.back()->end + 1e-3);
      }
      open.push_back(x);
    }
  }
}

int group_size(const std::string& dims, const std::map<std::string, int>& mesh) {
  int n = 1;
  if (dims == "world") {
    for (auto& [d, s] : mesh) n *= s;
    return n;
  }
  size_t p = 0;
  while (p <= dims.size()) {
    const size_t q = std::min(dims.find('+', p), dims.size());
    n *= mesh.at(dims.substr(p, q - p));
    p = q + 1;
  }
  return n;
}

// Exposed communication recounted naively: cut the step's time at every span boundary and test
// each piece's midpoint against every span.
double naive_exposed_ms(const std::vector<X>& xs, int pid) {
  std::vector<const X*> steps, waits, comm;
  std::vector<double> cuts;
  for (const auto& x : xs) {
    if (x.pid != pid) continue;
    if (x.cat == "step")
      steps.push_back(&x);
    else if (x.cat == "wait" && x.tid == 1)
      waits.push_back(&x);
    else if (x.cat == "collective" || x.cat == "send" || x.cat == "recv")
      comm.push_back(&x);
    else
      continue;
    cuts.push_back(x.ts), cuts.push_back(x.end);
  }
  std::sort(cuts.begin(), cuts.end());
  auto covered = [](const std::vector<const X*>& v, double t) {
    for (const X* x : v)
      if (x->ts <= t && t < x->end) return true;
    return false;
  };
  double us = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const double mid = (cuts[i] + cuts[i + 1]) / 2;
    if (covered(steps, mid) && covered(waits, mid) && covered(comm, mid))
      us += cuts[i + 1] - cuts[i];
  }
  return us / 1000.0;
}

int64_t skew_of(int rank) { return rank * 1'500'000'000LL + rank * 7'777LL; }

}  // namespace

TEST_CASE("timeline of DP x TP: valid, nested, numbered, aligned, adding up, straggler named",
          "[timeline][world4]") {
  const int rank = dist::rank();
  const std::string dir = scratch("dp_tp");
  const std::string out = dir + "/trace.json", metrics = dir + "/metrics.jsonl";
  timeline::set_clock_skew_for_test(skew_of(rank));
  {
    Config cfg =
        tiny_llama({"log.timeline.steps=\"2-3\"", "log.timeline.out=\"" + out + "\"",
                    "log.timeline.per_rank=true", "log.metrics_jsonl=\"" + metrics + "\""});
    cfg.parallel.plan = testing::repo_file("configs/plans/llama_dp_tp.json");
    cfg.parallel.mesh = {{"dp", 2}, {"tp", 2}};
    Trainer t(std::move(cfg), mesh::DeviceMesh::init({{"dp", 2}, {"tp", 2}}));
    // The straggler: rank 2 sleeps 40 ms at the start of every step.
    t.set_step_hook([rank](int64_t) {
      if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(40));
    });
    t.run();
  }
  timeline::set_clock_skew_for_test(0);
  dist::barrier();
  if (rank != 0) return;

  const json trace = read_json(out);
  const auto xs = complete_events(trace);
  std::map<int, std::string> processes;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
  REQUIRE(processes.size() == 4);
  CHECK(processes.at(3) == "rank 3 (dp=1, tp=1)");
  check_nesting(xs);

  // Two steps per rank, forward and backward spans per block inside them (the evaluation
  // after the last step runs forwards too, outside the steps).
  for (int r = 0; r < 4; ++r) {
    std::set<int64_t> steps;
    std::vector<const X*> step_spans;
    for (const auto& x : xs)
      if (x.pid == r && x.cat == "step")
        steps.insert(x.args["step"].get<int64_t>()), step_spans.push_back(&x);
    auto in_step = [&](const X& x) {
      for (const X* s : step_spans)
        if (s->ts <= x.ts && x.end <= s->end) return true;
      return false;
    };
    int block_fwd = 0, block_bwd = 0;
    for (const auto& x : xs) {
      if (x.pid != r || !in_step(x) || x.name.rfind("layers.", 0) != 0) continue;
      block_fwd += x.cat == "forward";
      block_bwd += x.cat == "backward";
    }
    CHECK(steps == std::set<int64_t>{2, 3});
    CHECK(block_fwd == 2 * 2);  // two layers, two steps
    CHECK(block_bwd == 2 * 2);
    // The step's phases, DTensor redistributions with their collectives, the gradient bucket.
    std::map<std::string, int> cats;
    int bucket = 0, redistributing = 0;
    for (const auto& x : xs) {
      if (x.pid != r || !in_step(x)) continue;
      ++cats[x.cat];
      if (x.cat != "collective") continue;
      bucket += x.name.rfind("grad bucket 0: all_reduce", 0) == 0 && x.args["dims"] == "dp";
      redistributing += x.args.value("context", "") == "redistribute" && x.args["dims"] == "tp";
    }
    for (const char* c : {"data", "forward", "loss", "backward", "grad_sync", "optimizer", "wait",
                          "redistribute"}) {
      INFO("rank " << r << " has no '" << c << "' span in its steps");
      CHECK(cats[c] > 0);
    }
    CHECK(bucket == 2);  // one bucket per step
    CHECK(redistributing > 0);
  }

  // Every collective once on each member of its group, under the same number.
  const std::map<std::string, int> mesh{{"dp", 2}, {"tp", 2}};
  std::map<std::pair<std::string, int64_t>, std::vector<const X*>> by_seq;
  std::set<std::string> dims_seen;
  for (const auto& x : xs) {
    if (x.cat != "collective") continue;
    by_seq[{x.args["group"], x.args["seq"]}].push_back(&x);
    dims_seen.insert(x.args["dims"]);
  }
  CHECK(dims_seen.count("tp") == 1);
  CHECK(dims_seen.count("dp") == 1);
  REQUIRE(by_seq.size() > 10);
  std::map<int, int64_t> error_us;
  std::map<int, std::vector<json>> samples;
  for (const auto& c : trace["otherData"]["clock_sync"]) {
    for (const auto& s : c["samples"]) samples[c["rank"]].push_back(s);
    int64_t e = 0;
    for (const auto& s : c["samples"]) e = std::max(e, s["error_ns"].get<int64_t>());
    error_us[c["rank"]] = e / 1000 + 1;
  }
  for (auto& [key, v] : by_seq) {
    INFO("group " << key.first << " collective #" << key.second << " (" << v[0]->name << ")");
    std::set<int> pids;
    for (const X* x : v) pids.insert(x->pid);
    CHECK(v.size() == static_cast<size_t>(group_size(v[0]->args["dims"], mesh)));
    CHECK(pids.size() == v.size());
    // No member finishes a reduction or gather before the last one started it.
    const std::string op = v[0]->args["op"];
    if (op == "broadcast" || op == "barrier") continue;
    for (const X* a : v) {
      for (const X* b : v) {
        INFO("rank " << a->pid << " ends at " << a->end << " us, rank " << b->pid << " starts at "
                     << b->ts << " us");
        CHECK(a->end + static_cast<double>(error_us[a->pid] + error_us[b->pid]) >= b->ts);
      }
    }
  }

  // The offsets undo the skews: rank r's clock runs skew(r) ahead of rank 0's.
  for (int r = 0; r < 4; ++r) {
    REQUIRE(samples[r].size() == 2);
    for (const auto& s : samples[r]) {
      INFO("rank " << r << ": offset " << s["offset_ns"] << " ns, error " << s["error_ns"]
                   << " ns");
      CHECK(std::llabs(s["offset_ns"].get<int64_t>() + skew_of(r)) <= s["error_ns"].get<int64_t>());
      CHECK(s["error_ns"].get<int64_t>() < 50'000'000);  // a round trip on loopback
    }
  }

  // The summary: per rank the three shares add up to the step; the step time and the exposed
  // time equal a recount from the spans; the sleeping rank is the straggler.
  const json summary = trace["otherData"]["summary"];
  REQUIRE(summary["ranks"].size() == 4);
  for (const auto& r : summary["ranks"]) {
    const int pid = r["rank"];
    const double step = r["step_ms"], sum = r["compute_ms"].get<double>() +
                                            r["overlapped_ms"].get<double>() +
                                            r["exposed_ms"].get<double>();
    INFO("rank " << pid << ": step " << step << " ms, compute + overlapped + exposed " << sum);
    CHECK(std::abs(sum - step) <= 0.01 * step);
    double steps_ms = 0;
    for (const auto& x : xs)
      if (x.pid == pid && x.cat == "step") steps_ms += (x.end - x.ts) / 1000.0;
    CHECK(std::abs(steps_ms - step) <= 0.01 * step);
    CHECK(std::abs(naive_exposed_ms(xs, pid) - r["exposed_ms"].get<double>()) <= 0.01 * step);
    CHECK(r["dims"].contains("tp"));
  }
  CHECK(summary["straggler"]["rank"] == 2);
  CHECK(summary["straggler"]["compute_gap_ms_per_step"].get<double>() > 20.0);

  // The same summary in the metrics JSONL; per-rank files for HTA.
  std::ifstream jl(metrics);
  int found = 0;
  for (std::string line; std::getline(jl, line);) {
    const json j = json::parse(line);
    if (j.contains("timeline")) {
      ++found;
      CHECK(j["step"] == 3);
      CHECK(j["timeline"]["straggler"]["rank"] == 2);
    }
  }
  CHECK(found == 1);
  for (int r = 0; r < 4; ++r) {
    const json f = read_json(dir + "/trace.rank-" + std::to_string(r) + ".json");
    CHECK(f["distributedInfo"]["rank"] == r);
    CHECK(f["distributedInfo"]["world_size"] == 4);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("timeline of a 2-stage pipeline: an arrow from every send to its receive",
          "[timeline][world2]") {
  const std::string dir = scratch("pp");
  const std::string out = dir + "/trace.json";
  {
    Config cfg = tiny_llama({"log.timeline.steps=\"2\"", "log.timeline.out=\"" + out + "\"",
                             "log.metrics_jsonl=\"\"", "train.steps=2"});
    cfg.parallel.plan = testing::repo_file("configs/plans/llama_pp.json");
    cfg.parallel.mesh = {{"pp", 2}};
    Trainer t(std::move(cfg), mesh::DeviceMesh::init({{"pp", 2}}));
    t.run();
  }
  dist::barrier();
  if (dist::rank() != 0) return;
  const json trace = read_json(out);
  const auto xs = complete_events(trace);
  check_nesting(xs);
  int sends = 0, recvs = 0, actions = 0;
  for (const auto& x : xs) {
    sends += x.cat == "send", recvs += x.cat == "recv", actions += x.cat == "pipeline";
  }
  CHECK(actions == 2 * 8 * 2);  // F and B of 8 micro-batches on each of 2 stages
  CHECK(sends > 0);
  CHECK(sends == recvs);
  std::map<int64_t, std::vector<json>> flows;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "s" || e["ph"] == "f") flows[e["id"]].push_back(e);
  CHECK(flows.size() == static_cast<size_t>(sends));
  for (auto& [id, ends] : flows) {
    REQUIRE(ends.size() == 2);
    CHECK(ends[0]["ph"] == "s");
    CHECK(ends[1]["ph"] == "f");
    CHECK(ends[0]["pid"] != ends[1]["pid"]);
    // Each end sits on a transfer span of its rank and thread.
    for (const auto& e : ends) {
      bool on_span = false;
      for (const auto& x : xs)
        on_span |= x.pid == e["pid"] && x.tid == e["tid"] && (x.cat == "send" || x.cat == "recv") &&
                   x.ts <= e["ts"].get<double>() + 1e-3 && e["ts"].get<double>() <= x.end + 1e-3;
      CHECK(on_span);
    }
  }
  std::filesystem::remove_all(dir);
}
