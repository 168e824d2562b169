#include "vescale/timeline/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <type_traits>

#include "vescale/common/check.h"
#include "vescale/common/utf8.h"

namespace vescale::timeline {

static_assert(std::is_trivially_copyable_v<Span>, "spans travel as bytes");

// ---- bytes ---------------------------------------------------------------------------------

namespace {
constexpr char kMagic[8] = {'V', 'S', 'T', 'L', 'I', 'N', 'E', '1'};

struct Writer {
  std::string out;
  template <class T>
  void pod(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    out += s;
  }
};

struct Reader {
  const std::string& in;
  size_t at = 0;
  void need(size_t n) const {
    VESCALE_CHECK(at + n <= in.size(), "timeline: a rank's spans are truncated (", in.size(),
                  " bytes); every rank must run the same vescale build");
  }
  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string text() {
    const auto n = pod<uint64_t>();
    need(n);
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
};
}  // namespace

std::string serialize(const RankTrace& t) {
  Writer w;
  w.out.append(kMagic, sizeof(kMagic));
  w.pod(static_cast<int32_t>(t.rank));
  w.text(t.label);
  w.pod(static_cast<uint64_t>(t.clock.size()));
  for (const auto& c : t.clock) w.pod(c);
  w.pod(t.window_begin_ns);
  w.pod(t.window_end_ns);
  w.text(t.world_dims);
  w.pod(t.spans.dropped);
  w.pod(static_cast<uint64_t>(t.spans.names.size()));
  for (const auto& n : t.spans.names) w.text(n);
  w.pod(static_cast<uint64_t>(t.spans.spans.size()));
  w.out.append(reinterpret_cast<const char*>(t.spans.spans.data()),
               t.spans.spans.size() * sizeof(Span));
  return w.out;
}

RankTrace deserialize(const std::string& bytes) {
  VESCALE_CHECK(
      bytes.size() >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0,
      "timeline: a rank sent ", bytes.size(),
      " bytes that are not its spans; every rank must run the same vescale build");
  Reader r{bytes, sizeof(kMagic)};
  RankTrace t;
  t.rank = r.pod<int32_t>();
  t.label = r.text();
  t.clock.resize(r.pod<uint64_t>());
  for (auto& c : t.clock) c = r.pod<ClockSample>();
  t.window_begin_ns = r.pod<int64_t>();
  t.window_end_ns = r.pod<int64_t>();
  t.world_dims = r.text();
  t.spans.dropped = r.pod<int64_t>();
  t.spans.names.resize(r.pod<uint64_t>());
  for (auto& n : t.spans.names) n = r.text();
  const auto n = r.pod<uint64_t>();
  r.need(n * sizeof(Span));
  t.spans.spans.resize(n);
  std::memcpy(t.spans.spans.data(), bytes.data() + r.at, n * sizeof(Span));
  return t;
}

// ---- clocks --------------------------------------------------------------------------------

int64_t to_rank0_clock(const RankTrace& t, int64_t local) {
  if (t.clock.empty()) return local;
  if (t.clock.size() == 1 || local <= t.clock.front().at_ns)
    return local + t.clock.front().offset_ns;
  if (local >= t.clock.back().at_ns) return local + t.clock.back().offset_ns;
  size_t i = 1;
  while (t.clock[i].at_ns < local) ++i;
  const auto& a = t.clock[i - 1];
  const auto& b = t.clock[i];
  const double f = static_cast<double>(local - a.at_ns) / static_cast<double>(b.at_ns - a.at_ns);
  return local + a.offset_ns +
         static_cast<int64_t>(f * static_cast<double>(b.offset_ns - a.offset_ns));
}

int64_t clock_error_ns(const RankTrace& t) {
  int64_t e = 0;
  for (const auto& c : t.clock) e = std::max(e, c.error_ns);
  return e;
}

// ---- merge ---------------------------------------------------------------------------------

const std::string& Merged::Rank::name(uint32_t id) const {
  static const std::string unknown = "?";
  return id < names.size() ? names[id] : unknown;
}

std::string Merged::Rank::dims(const Span& s) const {
  const std::string& g = name(s.group);
  return g == "world" && !world_dims.empty() ? world_dims : group_dims(g);
}

Merged merge(const std::vector<RankTrace>& traces) {
  Merged m;
  for (const auto& t : traces) {
    Merged::Rank r;
    r.rank = t.rank;
    r.label = t.label;
    r.clock = t.clock;
    r.names = t.spans.names;
    r.dropped = t.spans.dropped;
    r.world_dims = t.world_dims;
    for (Span s : t.spans.spans) {
      if (s.end_ns < t.window_begin_ns || s.begin_ns > t.window_end_ns) continue;  // stale
      s.begin_ns = to_rank0_clock(t, s.begin_ns);
      s.end_ns = to_rank0_clock(t, s.end_ns);
      r.spans.push_back(s);
    }
    std::sort(r.spans.begin(), r.spans.end(), [](const Span& a, const Span& b) {
      return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
    });
    m.ranks.push_back(std::move(r));
  }
  std::sort(m.ranks.begin(), m.ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  // Pair transfers by (sender, receiver, tag, number): the n-th send from a to b with a tag is
  // the n-th receive at b from a with that tag (group names match on both ends).
  std::map<int, size_t> index_of;
  for (size_t i = 0; i < m.ranks.size(); ++i) index_of[m.ranks[i].rank] = i;
  using Key = std::tuple<std::string, int, int, int, int64_t>;  // group, from, to, tag, seq
  std::map<Key, std::pair<size_t, size_t>> recvs;
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    const auto& r = m.ranks[i];
    for (size_t k = 0; k < r.spans.size(); ++k) {
      const Span& s = r.spans[k];
      if (s.kind == Kind::Recv) recvs[{r.name(s.group), s.peer, r.rank, s.tag, s.seq}] = {i, k};
    }
  }
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    auto& r = m.ranks[i];
    for (size_t k = 0; k < r.spans.size(); ++k) {
      Span& s = r.spans[k];
      if (s.kind != Kind::Send) continue;
      auto it = recvs.find({r.name(s.group), r.rank, s.peer, s.tag, s.seq});
      if (it == recvs.end()) continue;
      const auto [j, q] = it->second;
      const Span& recv = m.ranks[j].spans[q];
      // The data is there when the receiver's wait returns; the send was waited on later.
      s.end_ns = std::max(s.begin_ns, std::min(s.end_ns, recv.end_ns));
      m.flows.push_back({i, k, j, q});
    }
  }
  return m;
}

std::string group_dims(const std::string& g) {
  if (g.empty()) return "?";
  const auto first = g.find('/');
  if (first == std::string::npos) return g;  // "world"
  if (g.rfind("self", 0) == 0) return "self";
  const auto last = g.rfind('/');
  std::string dims = g.substr(first + 1, last > first ? last - first - 1 : std::string::npos);
  std::replace(dims.begin(), dims.end(), ',', '+');
  return dims;
}

// ---- JSON ----------------------------------------------------------------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      out += '\\', out += static_cast<char>(c), ++i;
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf, ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c), ++i;
    } else {
      // A well-formed UTF-8 sequence passes; anything else becomes U+FFFD.
      const size_t len = utf8_sequence_length(p + i, n - i);
      if (len > 0) {
        out.append(s, i, len), i += len;
      } else {
        out += "\xef\xbf\xbd", ++i;
      }
    }
  }
  return out;
}

namespace {

// Trace thread ids: the compute lane of the thread that ran the steps, then other threads'
// compute, each dim set's collectives (and overflow lanes), transfers, IO.
constexpr int kComputeTid = 1, kCommTid = 100, kP2PTid = 300, kIOTid = 500, kOtherThreadTid = 700;

struct Lanes {
  std::map<int, std::string> names;  // tid -> thread name
  std::vector<int> tid_of;           // per span
};

// A lane's name for a span that is not the main thread's compute.
std::string lane_base(const Merged::Rank& r, const Span& s) {
  switch (s.lane) {
    case Lane::Comm:
      return "comm " + r.dims(s);
    case Lane::P2P:
      return "p2p " + r.dims(s);
    case Lane::IO:
      return "io";
    case Lane::Compute:
      break;
  }
  return "compute (thread " + std::to_string(s.thread) + ")";
}

// Spans that may overlap (collectives in flight together, transfers) get the first lane of
// their kind that is free at their start, so every lane's spans nest (Chrome's rule).
Lanes assign_lanes(const Merged::Rank& r) {
  Lanes L;
  L.tid_of.assign(r.spans.size(), kComputeTid);
  // The thread that recorded the steps is "compute".
  std::map<uint16_t, int64_t> steps_by_thread;
  for (const auto& s : r.spans)
    if (s.lane == Lane::Compute) steps_by_thread[s.thread] += s.kind == Kind::Step ? 1000000 : 1;
  uint16_t main = 0;
  int64_t best = -1;
  for (auto [t, n] : steps_by_thread)
    if (n > best) best = n, main = t;
  L.names[kComputeTid] = "compute";
  std::map<std::string, std::vector<std::pair<int, int64_t>>> open;  // base -> (tid, busy until)
  std::map<std::string, int> first_tid;
  int next[3] = {kCommTid, kP2PTid, kIOTid};
  int next_other = kOtherThreadTid;
  for (size_t i = 0; i < r.spans.size(); ++i) {  // spans are sorted by start
    const Span& s = r.spans[i];
    if (s.lane == Lane::Compute && s.thread == main) continue;
    const std::string base = lane_base(r, s);
    if (s.lane == Lane::Compute) {  // another thread's compute nests by construction
      auto [it, fresh] = first_tid.try_emplace(base, next_other);
      if (fresh) L.names[next_other++] = base;
      L.tid_of[i] = it->second;
      continue;
    }
    auto& lanes = open[base];
    int tid = -1;
    for (auto& [t, until] : lanes) {
      if (until <= s.begin_ns) {
        tid = t, until = s.end_ns;
        break;
      }
    }
    if (tid < 0) {
      int& n = next[s.lane == Lane::Comm ? 0 : s.lane == Lane::P2P ? 1 : 2];
      tid = n++;
      lanes.emplace_back(tid, s.end_ns);
      L.names[tid] = lanes.size() == 1 ? base : base + " #" + std::to_string(lanes.size());
    }
    L.tid_of[i] = tid;
  }
  return L;
}

void put_us(std::string& out, int64_t ns) {
  char buf[40];
  const int64_t us = ns / 1000, frac = ns % 1000;
  if (ns < 0) {
    std::snprintf(buf, sizeof(buf), "%.3f", static_cast<double>(ns) / 1000.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%" PRId64 ".%03" PRId64, us, frac);
  }
  out += buf;
}

std::string span_name(const Merged::Rank& r, const Span& s) {
  if (s.kind == Kind::Step) return "step " + std::to_string(s.seq);
  std::string n = r.name(s.name);
  if (s.kind == Kind::Collective && s.context != 0) {
    std::string ctx = r.name(s.context);
    if (s.detail >= 0) ctx += " " + std::to_string(s.detail);
    n = ctx + ": " + n;
  }
  if (s.kind == Kind::Send) n += " to " + std::to_string(s.peer);
  if (s.kind == Kind::Recv) n += " from " + std::to_string(s.peer);
  return n;
}

void put_args(std::string& out, const Merged::Rank& r, const Span& s) {
  out += "\"args\":{";
  bool first = true;
  auto field = [&](const char* k) {
    out += first ? "\"" : ",\"";
    out += k;
    out += "\":";
    first = false;
  };
  if (s.kind == Kind::Step) field("step"), out += std::to_string(s.seq);
  if (s.group != 0) {
    field("group"), out += "\"" + json_escape(r.name(s.group)) + "\"";
    field("dims"), out += "\"" + json_escape(r.dims(s)) + "\"";
  }
  if (s.kind == Kind::Collective || s.kind == Kind::Send || s.kind == Kind::Recv) {
    field("op"), out += "\"" + json_escape(r.name(s.name)) + "\"";
    field("seq"), out += std::to_string(s.seq);
    field("bytes"), out += std::to_string(s.bytes);
  }
  if (s.kind == Kind::Send || s.kind == Kind::Recv) {
    field("peer"), out += std::to_string(s.peer);
    field("tag"), out += std::to_string(s.tag);
  }
  if (s.context != 0) field("context"), out += "\"" + json_escape(r.name(s.context)) + "\"";
  if (s.detail >= 0) field("index"), out += std::to_string(s.detail);
  out += "}";
}

int64_t first_ns(const Merged& m) {
  int64_t t0 = INT64_MAX;
  for (const auto& r : m.ranks)
    for (const auto& s : r.spans) t0 = std::min(t0, s.begin_ns);
  return t0 == INT64_MAX ? 0 : t0;
}

void put_metadata(std::string& out, int pid, int tid, const char* what, const std::string& key,
                  const std::string& value, bool& comma) {
  out += comma ? ",\n" : "\n";
  comma = true;
  out += "{\"ph\":\"M\",\"pid\":" + std::to_string(pid);
  if (tid >= 0) out += ",\"tid\":" + std::to_string(tid);
  out += std::string(",\"name\":\"") + what + "\",\"args\":{\"" + key + "\":" + value + "}}";
}

// The events of ranks[index] (all of them when index < 0).
std::string events_json(const Merged& m, long index, int64_t t0) {
  std::string out;
  bool comma = false;
  std::vector<std::vector<int>> tids(m.ranks.size());
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    if (index >= 0 && static_cast<long>(i) != index) continue;
    const auto& r = m.ranks[i];
    const Lanes lanes = assign_lanes(r);
    tids[i] = lanes.tid_of;
    put_metadata(out, r.rank, -1, "process_name", "name", "\"" + json_escape(r.label) + "\"",
                 comma);
    put_metadata(out, r.rank, -1, "process_sort_index", "sort_index", std::to_string(r.rank),
                 comma);
    for (const auto& [tid, name] : lanes.names) {
      put_metadata(out, r.rank, tid, "thread_name", "name", "\"" + json_escape(name) + "\"", comma);
      put_metadata(out, r.rank, tid, "thread_sort_index", "sort_index", std::to_string(tid), comma);
    }
    for (size_t k = 0; k < r.spans.size(); ++k) {
      const Span& s = r.spans[k];
      out += ",\n{\"ph\":\"X\",\"pid\":" + std::to_string(r.rank) +
             ",\"tid\":" + std::to_string(lanes.tid_of[k]) + ",\"ts\":";
      put_us(out, s.begin_ns - t0);
      out += ",\"dur\":";
      put_us(out, std::max<int64_t>(0, s.end_ns - s.begin_ns));
      out += ",\"name\":\"" + json_escape(span_name(r, s)) + "\",\"cat\":\"" + to_string(s.kind) +
             "\",";
      put_args(out, r, s);
      out += "}";
    }
  }
  if (index >= 0) return out;
  // Flow arrows: from inside the send's slice to the end of the receive's.
  for (size_t f = 0; f < m.flows.size(); ++f) {
    const auto& fl = m.flows[f];
    const Span& send = m.ranks[fl.from].spans[fl.send];
    const Span& recv = m.ranks[fl.to].spans[fl.recv];
    auto flow = [&](const char* ph, size_t ri, size_t si, int64_t ts, const char* bind) {
      out += std::string(",\n{\"ph\":\"") + ph + "\",\"id\":" + std::to_string(f + 1) +
             ",\"pid\":" + std::to_string(m.ranks[ri].rank) +
             ",\"tid\":" + std::to_string(tids[ri][si]) + ",\"ts\":";
      put_us(out, ts - t0);
      out += std::string(",\"name\":\"p2p\",\"cat\":\"p2p\"") + bind + "}";
    };
    flow("s", fl.from, fl.send, send.begin_ns, "");
    flow("f", fl.to, fl.recv, std::max(recv.begin_ns, recv.end_ns), ",\"bp\":\"e\"");
  }
  return out;
}

std::string clock_json(const Merged& m) {
  std::string out = "[";
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    const auto& r = m.ranks[i];
    out += (i ? "," : "") + std::string("{\"rank\":") + std::to_string(r.rank) + ",\"samples\":[";
    for (size_t k = 0; k < r.clock.size(); ++k) {
      const auto& c = r.clock[k];
      out += (k ? "," : "") + std::string("{\"offset_ns\":") + std::to_string(c.offset_ns) +
             ",\"error_ns\":" + std::to_string(c.error_ns) + "}";
    }
    out += "],\"dropped_spans\":" + std::to_string(r.dropped) + "}";
  }
  return out + "]";
}

}  // namespace

std::string chrome_trace_json(const Merged& m, const std::string& other_data_json) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out += events_json(m, -1, first_ns(m));
  out += "\n],\"otherData\":{\"clock_sync\":" + clock_json(m);
  const auto brace = other_data_json.find('{');
  if (brace != std::string::npos) {
    std::string rest = other_data_json.substr(brace + 1);
    const auto close = rest.find_last_of('}');
    if (close != std::string::npos) rest.resize(close);
    if (rest.find_first_not_of(" \n\t") != std::string::npos) out += "," + rest;
  }
  return out + "}}\n";
}

std::string rank_trace_json(const Merged& m, size_t index, const std::string& backend) {
  VESCALE_CHECK(index < m.ranks.size(), "timeline: no rank at index ", index);
  std::string out = "{\"schemaVersion\":1,\"distributedInfo\":{\"backend\":\"" +
                    json_escape(backend) + "\",\"rank\":" + std::to_string(m.ranks[index].rank) +
                    ",\"world_size\":" + std::to_string(m.ranks.size()) +
                    "},\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out += events_json(m, static_cast<long>(index), first_ns(m));
  return out + "\n]}\n";
}

}  // namespace vescale::timeline
