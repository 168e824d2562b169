#include "vescale/timeline/recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "timeline/device_events.h"

namespace vescale::timeline {

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::Step:
      return "step";
    case Kind::Forward:
      return "forward";
    case Kind::Backward:
      return "backward";
    case Kind::Recompute:
      return "recompute";
    case Kind::Loss:
      return "loss";
    case Kind::Optimizer:
      return "optimizer";
    case Kind::GradSync:
      return "grad_sync";
    case Kind::Data:
      return "data";
    case Kind::Collective:
      return "collective";
    case Kind::Wait:
      return "wait";
    case Kind::Redistribute:
      return "redistribute";
    case Kind::Send:
      return "send";
    case Kind::Recv:
      return "recv";
    case Kind::Checkpoint:
      return "checkpoint";
    case Kind::Eval:
      return "eval";
    case Kind::Pipeline:
      return "pipeline";
    case Kind::Other:
      return "other";
  }
  return "other";
}

namespace {

std::atomic<bool> g_enabled{false};
std::atomic<int64_t> g_skew{0};
std::atomic<bool> g_device{false};
int32_t device_event() {
  return g_device.load(std::memory_order_relaxed) ? detail::device_event() : -1;
}

// One thread's spans: a single writer (its thread) and a reader (drain) that only reads what
// `head` says is written. When full, the oldest spans are overwritten and counted as dropped.
constexpr int64_t kRingSpans = 1 << 14;  // 1 MiB per recording thread
struct Ring {
  std::unique_ptr<Span[]> spans{new Span[kRingSpans]};
  std::atomic<int64_t> head{0};  // spans ever written
  int64_t tail = 0;              // spans drained (reader only)
  uint16_t index = 0;
  bool in_use = true;  // a live thread owns it (guarded by the registry's lock)
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Ring>> rings;
  std::vector<std::string> names{""};
  std::unordered_map<std::string, uint32_t> ids{{"", 0}};
};
Registry& registry() {
  static auto* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

// Gives the thread's ring back for another thread to reuse (threads come and go: one per
// checkpoint write), keeping what it recorded for the next drain.
struct RingHandle {
  Ring* ring = nullptr;
  ~RingHandle() {
    if (!ring) return;
    std::lock_guard<std::mutex> lock(registry().mu);
    ring->in_use = false;
  }
};
thread_local RingHandle t_ring;

Ring& my_ring() {
  if (t_ring.ring) return *t_ring.ring;
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (auto& r : reg.rings) {
    if (!r->in_use) {
      r->in_use = true;
      return *(t_ring.ring = r.get());
    }
  }
  reg.rings.push_back(std::make_unique<Ring>());
  reg.rings.back()->index = static_cast<uint16_t>(reg.rings.size() - 1);
  return *(t_ring.ring = reg.rings.back().get());
}

struct Open {
  int64_t begin;
  uint32_t name;
  Kind kind;
  int32_t device_begin;
};
thread_local std::vector<Open> t_open;
thread_local uint32_t t_context = 0;
thread_local int32_t t_detail = -1;

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

int64_t now_ns() {
  const auto t = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t).count() +
         g_skew.load(std::memory_order_relaxed);
}
void set_clock_skew_for_test(int64_t ns) { g_skew.store(ns); }

bool set_device_timing(bool on) {
  if (on && !detail::device_timing_available()) on = false;
  if (on) detail::device_window_begin();
  g_device.store(on);
  return on;
}

uint32_t intern(std::string_view name) {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto [it, fresh] =
      reg.ids.try_emplace(std::string(name), static_cast<uint32_t>(reg.names.size()));
  if (fresh) reg.names.emplace_back(name);
  return it->second;
}

void record(Span span) {
  Ring& r = my_ring();
  span.thread = r.index;
  const int64_t h = r.head.load(std::memory_order_relaxed);
  r.spans[h % kRingSpans] = span;
  r.head.store(h + 1, std::memory_order_release);
}

Scope::Scope(Kind kind, uint32_t name, int64_t seq) : seq_(seq), name_(name), kind_(kind) {
  if (enabled()) begin_ = now_ns(), device_begin_ = device_event();
}
Scope::~Scope() {
  if (begin_ < 0) return;
  Span s;
  s.begin_ns = begin_;
  s.end_ns = now_ns();
  s.seq = seq_;
  s.name = name_;
  s.kind = kind_;
  s.device_begin = device_begin_;
  s.device_end = device_begin_ >= 0 ? device_event() : -1;
  record(s);
}

CommContext::CommContext(uint32_t context, int32_t detail)
    : previous_(t_context), previous_detail_(t_detail) {
  t_context = context, t_detail = detail;
}
CommContext::~CommContext() { t_context = previous_, t_detail = previous_detail_; }
uint32_t CommContext::current() { return t_context; }
int32_t CommContext::current_detail() { return t_detail; }

void begin(Kind kind, uint32_t name) {
  if (enabled()) t_open.push_back({now_ns(), name, kind, device_event()});
}

void end(Kind kind, uint32_t name) {
  for (size_t i = t_open.size(); i-- > 0;) {
    if (t_open[i].kind != kind || t_open[i].name != name) continue;
    Span s;
    s.begin_ns = t_open[i].begin;
    s.end_ns = now_ns();
    s.name = name;
    s.kind = kind;
    s.device_begin = t_open[i].device_begin;
    s.device_end = s.device_begin >= 0 ? device_event() : -1;
    t_open.resize(i);  // what was opened inside it and never closed goes too
    record(s);
    return;
  }
}

void discard_open() { t_open.clear(); }

RankSpans drain() {
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  RankSpans out;
  for (auto& r : reg.rings) {
    const int64_t head = r->head.load(std::memory_order_acquire);
    const int64_t from = std::max(r->tail, head - kRingSpans);
    out.dropped += from - r->tail;
    for (int64_t i = from; i < head; ++i) out.spans.push_back(r->spans[i % kRingSpans]);
    r->tail = head;
  }
  out.names = reg.names;
  // GPU work: the events' times replace the launch times.
  const std::vector<int64_t> times = detail::device_event_times();
  for (auto& s : out.spans) {
    if (s.device_begin >= 0 && s.device_begin < static_cast<int32_t>(times.size()) &&
        s.device_end >= 0 && s.device_end < static_cast<int32_t>(times.size())) {
      s.begin_ns = times[s.device_begin];
      s.end_ns = times[s.device_end];
    }
  }
  return out;
}

}  // namespace vescale::timeline
