// The timeline's pieces on one process, each against hand-computed values: the per-thread ring
// (nesting, drops when full), strict JSON escaping, the bytes a rank sends, clock interpolation,
// the send/receive pairing, lane assignment, and the summary's arithmetic.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <thread>

#include "vescale/timeline/recorder.h"
#include "vescale/timeline/summary.h"
#include "vescale/timeline/trace.h"
#include "vescale/train/config.h"

using namespace vescale::timeline;

namespace {

Span span(Kind kind, int64_t begin_us, int64_t end_us, Lane lane = Lane::Compute) {
  Span s;
  s.kind = kind;
  s.lane = lane;
  s.begin_ns = begin_us * 1000;
  s.end_ns = end_us * 1000;
  return s;
}

// A rank whose names are {"", "world-ish group", "all_reduce"} and whose window holds `spans`.
RankTrace rank_with(int rank, std::vector<Span> spans, const std::string& group = "mesh0/dp/0") {
  RankTrace t;
  t.rank = rank;
  t.label = "rank " + std::to_string(rank);
  t.window_begin_ns = 0;
  t.window_end_ns = INT64_MAX;
  t.spans.names = {"", group, "all_reduce", "send", "recv"};
  for (auto& s : spans) {
    if (s.kind == Kind::Collective || s.kind == Kind::Send || s.kind == Kind::Recv) s.group = 1;
    if (s.kind == Kind::Collective) s.name = 2;
  }
  t.spans.spans = std::move(spans);
  return t;
}

}  // namespace

TEST_CASE("a thread's scopes come back nested, with their step number", "[timeline]") {
  drain();
  set_enabled(true);
  const uint32_t outer = intern("outer"), inner = intern("inner");
  {
    Scope a(Kind::Step, outer, 7);
    Scope b(Kind::Forward, inner);
  }
  set_enabled(false);
  { Scope off(Kind::Forward, inner); }  // off: nothing
  const RankSpans got = drain();
  REQUIRE(got.spans.size() == 2);
  const Span& f = got.spans[0].kind == Kind::Forward ? got.spans[0] : got.spans[1];
  const Span& s = got.spans[0].kind == Kind::Step ? got.spans[0] : got.spans[1];
  CHECK(got.names.at(s.name) == "outer");
  CHECK(s.seq == 7);
  CHECK(s.begin_ns <= f.begin_ns);
  CHECK(f.end_ns <= s.end_ns);
  CHECK(intern("outer") == outer);  // one id per name
  CHECK(drain().spans.empty());
}

TEST_CASE("begin/end pairs close the innermost open span of their name", "[timeline]") {
  drain();
  set_enabled(true);
  const uint32_t a = intern("block a"), b = intern("block b");
  begin(Kind::Backward, a);
  begin(Kind::Backward, b);
  end(Kind::Backward, b);
  end(Kind::Backward, a);
  end(Kind::Backward, b);  // unmatched: ignored
  begin(Kind::Backward, b);
  discard_open();
  end(Kind::Backward, b);  // discarded: nothing
  set_enabled(false);
  const RankSpans got = drain();
  REQUIRE(got.spans.size() == 2);
  CHECK(got.spans[0].name == b);  // b closed first
  CHECK(got.spans[1].name == a);
  CHECK(got.spans[1].begin_ns <= got.spans[0].begin_ns);
  CHECK(got.spans[0].end_ns <= got.spans[1].end_ns);
}

TEST_CASE("a full ring keeps the newest spans and counts the dropped ones", "[timeline]") {
  drain();
  std::thread t([] {  // a fresh thread: its own ring
    for (int64_t i = 0; i < 20000; ++i) {
      Span s;
      s.seq = i;
      record(s);
    }
  });
  t.join();
  const RankSpans got = drain();
  CHECK(got.dropped == 20000 - 16384);
  REQUIRE(got.spans.size() == 16384);
  int64_t lo = INT64_MAX, hi = 0;
  for (const auto& s : got.spans) lo = std::min(lo, s.seq), hi = std::max(hi, s.seq);
  CHECK(lo == 20000 - 16384);
  CHECK(hi == 19999);
}

TEST_CASE("JSON strings: control characters escaped, invalid UTF-8 replaced", "[timeline]") {
  CHECK(json_escape("a\"b\\c") == "a\\\"b\\\\c");
  CHECK(json_escape(std::string("\x01\n\t\x7f", 4)) == "\\u0001\\u000a\\u0009\\u007f");
  CHECK(json_escape("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80") ==
        "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
  CHECK(json_escape("\xff") == "\xef\xbf\xbd");                  // never a UTF-8 byte
  CHECK(json_escape("\xc3") == "\xef\xbf\xbd");                  // truncated sequence
  CHECK(json_escape("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");  // overlong
  CHECK(json_escape("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  // Whatever the input, the output parses as a JSON string.
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  CHECK_NOTHROW(nlohmann::json::parse("\"" + json_escape(all) + "\""));
}

TEST_CASE("a rank's trace survives the trip as bytes", "[timeline]") {
  RankTrace t = rank_with(3, {span(Kind::Step, 5, 90), span(Kind::Collective, 10, 20, Lane::Comm)});
  t.label = "rank 3 (dp=1, tp=1)";
  t.clock = {{100, -5000, 40}, {900, -5100, 35}};
  t.spans.dropped = 2;
  const RankTrace back = deserialize(serialize(t));
  CHECK(back.rank == 3);
  CHECK(back.label == t.label);
  REQUIRE(back.clock.size() == 2);
  CHECK(back.clock[1].offset_ns == -5100);
  CHECK(back.spans.names == t.spans.names);
  CHECK(back.spans.dropped == 2);
  REQUIRE(back.spans.spans.size() == 2);
  CHECK(back.spans.spans[1].end_ns == 20000);
  CHECK_THROWS_WITH(deserialize("not spans"), Catch::Contains("same vescale build"));
  CHECK_THROWS_WITH(deserialize(serialize(t).substr(0, 40)), Catch::Contains("truncated"));
}

TEST_CASE("clock offsets interpolate between the window's two samples", "[timeline]") {
  RankTrace t;
  t.clock = {{1000, 500, 10}, {3000, 700, 30}};
  CHECK(to_rank0_clock(t, 0) == 500);            // before: the first offset
  CHECK(to_rank0_clock(t, 2000) == 2000 + 600);  // halfway: halfway
  CHECK(to_rank0_clock(t, 5000) == 5700);        // after: the last
  CHECK(clock_error_ns(t) == 30);
}

TEST_CASE("merge pairs each send with its receive and ends the send at the receive", "[timeline]") {
  Span send = span(Kind::Send, 10, 500, Lane::P2P);
  send.peer = 1, send.tag = 4, send.seq = 0;
  Span recv = span(Kind::Recv, 5, 60, Lane::P2P);
  recv.peer = 0, recv.tag = 4, recv.seq = 0;
  Span other = span(Kind::Recv, 70, 80, Lane::P2P);  // another tag: no pair
  other.peer = 0, other.tag = 5, other.seq = 0;
  auto r1 = rank_with(1, {recv, other}, "mesh0/pp/0");
  r1.clock = {{0, 1000, 5}};  // rank 1's clock is 1 us behind rank 0's
  const Merged m = merge({rank_with(0, {send}, "mesh0/pp/0"), r1});
  REQUIRE(m.flows.size() == 1);
  const Span& s = m.ranks[m.flows[0].from].spans[m.flows[0].send];
  const Span& r = m.ranks[m.flows[0].to].spans[m.flows[0].recv];
  CHECK(r.begin_ns == 5000 + 1000);  // on rank 0's clock
  CHECK(r.end_ns == 61000);
  CHECK(s.end_ns == 61000);  // the send ends when the data was there
  CHECK(group_dims("mesh0/dp,tp/1") == "dp+tp");
  CHECK(group_dims("world") == "world");
}

TEST_CASE("spans outside a rank's window are left out", "[timeline]") {
  auto t =
      rank_with(0, {span(Kind::Step, 1, 2), span(Kind::Step, 10, 20), span(Kind::Step, 40, 50)});
  t.window_begin_ns = 5000, t.window_end_ns = 30000;
  const Merged m = merge({t});
  REQUIRE(m.ranks[0].spans.size() == 1);
  CHECK(m.ranks[0].spans[0].begin_ns == 10000);
}

TEST_CASE("the Chrome trace: processes, overlapping collectives on two lanes, flows",
          "[timeline]") {
  Span send = span(Kind::Send, 10, 30, Lane::P2P);
  send.peer = 1;
  Span recv = span(Kind::Recv, 12, 31, Lane::P2P);
  recv.peer = 0;
  const Merged m = merge({rank_with(0, {span(Kind::Step, 0, 100), span(Kind::Forward, 5, 50),
                                        span(Kind::Collective, 10, 40, Lane::Comm),
                                        span(Kind::Collective, 20, 60, Lane::Comm), send}),
                          rank_with(1, {span(Kind::Step, 0, 100), recv})});
  const auto j = nlohmann::json::parse(chrome_trace_json(m, "{\"steps\":\"2-3\"}"));
  CHECK(j["otherData"]["steps"] == "2-3");
  CHECK(j["otherData"]["clock_sync"].size() == 2);
  std::map<std::pair<int, int>, std::string> threads;
  std::map<int, std::string> processes;
  int flows = 0, x = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      threads[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
    if (e["ph"] == "s" || e["ph"] == "f") ++flows;
    if (e["ph"] == "X") ++x;
  }
  CHECK(processes.at(1) == "rank 1");
  CHECK(x == 7);
  CHECK(flows == 2);
  std::set<std::string> names;
  for (auto& [k, v] : threads)
    if (k.first == 0) names.insert(v);
  CHECK(names == std::set<std::string>{"compute", "comm dp", "comm dp #2", "p2p dp"});
  // A per-rank file carries distributedInfo.
  const auto r = nlohmann::json::parse(rank_trace_json(m, 1, "gloo"));
  CHECK(r["distributedInfo"]["rank"] == 1);
  CHECK(r["distributedInfo"]["world_size"] == 2);
}

TEST_CASE("the summary splits each step into compute, overlapped and exposed", "[timeline]") {
  // Step 0-100 us. Collectives in flight 10-40 and 30-70 (union 10-70); the step's thread
  // waits 50-80. Exposed = 50-70 (20), overlapped = 10-50 (40), compute = the rest (40).
  Span wait = span(Kind::Wait, 50, 80);
  const Merged m = merge(
      {rank_with(0, {span(Kind::Step, 0, 100), span(Kind::Collective, 10, 40, Lane::Comm),
                     span(Kind::Collective, 30, 70, Lane::Comm), wait}),
       // rank 1 computes 90 of 100 us: the straggler, by compute
       rank_with(1, {span(Kind::Step, 2, 101), span(Kind::Collective, 92, 100, Lane::Comm)})});
  const Summary s = summarize(m);
  REQUIRE(s.ranks.size() == 2);
  const auto& r0 = s.ranks[0];
  CHECK(r0.step_ms == Approx(0.100));
  CHECK(r0.exposed_ms == Approx(0.020));
  CHECK(r0.overlapped_ms == Approx(0.040));
  CHECK(r0.compute_ms == Approx(0.040));
  REQUIRE(r0.dims.size() == 1);
  CHECK(r0.dims[0].dims == "dp");
  CHECK(r0.dims[0].collectives == 2);
  CHECK(s.ranks[1].compute_ms == Approx(0.091));
  CHECK(s.straggler_rank == 1);
  CHECK(s.least_compute_rank == 0);
  CHECK(s.compute_gap_ms == Approx(0.051));
  CHECK(s.slowest_rank == 0);  // 100 vs 99 us
  CHECK(s.step_gap_ms == Approx(0.001));
  const auto j = nlohmann::json::parse(s.to_json());
  CHECK(j["straggler"]["rank"] == 1);
  CHECK(j["ranks"][0]["exposed_share"].get<double>() == Approx(0.2));
  CHECK_THAT(s.to_text(), Catch::Contains("straggler: rank 1"));
}

TEST_CASE("log.timeline.steps: windows, defaults and errors", "[timeline]") {
  using vescale::train::timeline_window;
  using vescale::train::TimelineConfig;
  CHECK(timeline_window(TimelineConfig{}, 10) == std::pair<int64_t, int64_t>{0, -1});
  CHECK(timeline_window(TimelineConfig{"5-7", "", false}, 10) == std::pair<int64_t, int64_t>{5, 7});
  CHECK(timeline_window(TimelineConfig{"6", "", false}, 10) == std::pair<int64_t, int64_t>{6, 6});
  CHECK(timeline_window(TimelineConfig{"8-20", "", false}, 10) ==
        std::pair<int64_t, int64_t>{8, 10});
  CHECK(timeline_window(TimelineConfig{"", "t.json", false}, 3) ==
        std::pair<int64_t, int64_t>{2, 3});
  CHECK_THROWS_WITH(timeline_window(TimelineConfig{"five", "", false}, 10), Catch::Contains("A-B"));
  CHECK_THROWS_WITH(timeline_window(TimelineConfig{"7-5", "", false}, 10),
                    Catch::Contains("A <= B"));
  CHECK_THROWS_WITH(timeline_window(TimelineConfig{"12-14", "", false}, 10),
                    Catch::Contains("train.steps = 10"));
}
