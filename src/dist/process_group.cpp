#include "vescale/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef VESCALE_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <numeric>
#include <optional>
#include <string_view>

#include "dist/process_group_impl.h"
#include "dist/roll_call.h"
#include "vescale/common/check.h"
#include "vescale/common/error_text.h"
#include "vescale/common/logging.h"
#include "vescale/timeline/recorder.h"

namespace vescale::dist {

const char* to_string(Backend b) { return b == Backend::Gloo ? "gloo" : "nccl"; }

// ---- Work ------------------------------------------------------------------------------

struct Work::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  std::function<void()> finish;  // local post-processing (unpad, divide for avg)
  std::string what;              // "all_reduce on group 'world' (rank 1 of 4)"
  std::chrono::milliseconds timeout{0};
  bool done = false;
  // Timeline: the op and group of the Wait span; a transfer (or an NCCL collective, whose
  // completion the host does not see) is recorded when waited on.
  const char* op = "";
  uint32_t group = 0;
  std::optional<timeline::Span> close_at_wait;
  // On a timeout: the group, the collective's number on it, a transfer's peer (global rank).
  std::shared_ptr<const ProcessGroup::Impl> group_impl;
  int64_t seq = 0;
  int peer = -1;
};

Work::Work() = default;
Work::Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

bool Work::is_completed() const {
  return !impl_ || impl_->done || (impl_->work && impl_->work->isCompleted());
}

void Work::wait() {
  if (impl_) wait(impl_->timeout);
}

namespace {
// The timeline's name id of an op, interned once per op (no lock per traced call).
uint32_t op_id(std::string_view op) {
  static const std::vector<std::pair<std::string_view, uint32_t>> ids = [] {
    std::vector<std::pair<std::string_view, uint32_t>> v;
    for (std::string_view o : {"all_reduce", "all_gather", "all_gather_uneven", "reduce_scatter",
                               "all_to_all", "broadcast", "send", "recv", "barrier"})
      v.emplace_back(o, timeline::intern(o));
    return v;
  }();
  for (const auto& [name, id] : ids)
    if (name == op) return id;
  return timeline::intern(op);
}

bool mentions_timeout(const std::string& s) {
  std::string low(s);
  std::transform(low.begin(), low.end(), low.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return low.find("timed out") != std::string::npos || low.find("timeout") != std::string::npos;
}
}  // namespace

void Work::wait(std::chrono::milliseconds timeout) {
  if (!impl_ || impl_->done) return;
  const int64_t wait_begin = timeline::enabled() ? timeline::now_ns() : -1;
  try {
    if (impl_->work) impl_->work->wait(timeout);
  } catch (const std::exception& e) {
    impl_->done = true;
    // libtorch's text (with its C++ stack) only at --log-level debug: it names no rank.
    const bool debug = log::level() == "debug" || log::level() == "trace";
    const std::string detail = debug ? " (" + error_text(e, true) + ")" : "";
    if (mentions_timeout(e.what())) {
      std::string who;
      if (impl_->peer >= 0) {
        who = "rank " + std::to_string(impl_->peer) + " did not answer";
      } else if (impl_->group_impl && impl_->group_impl->store) {
        const auto& g = *impl_->group_impl;
        who = missing_members(g.store, g.rank, g.global_ranks, impl_->seq,
                              std::min(timeout / 2, std::chrono::milliseconds(10000)));
      }
      throw TimeoutError(detail::cat(impl_->what, " did not finish within ", timeout.count(), " ms",
                                     who.empty() ? "" : ": " + who,
                                     ". Raise VESCALE_COLLECTIVE_TIMEOUT_S if this wait is "
                                     "expected",
                                     detail));
    }
    VESCALE_FAIL(impl_->what, " failed: ", error_text(e, debug));
  }
  impl_->done = true;
  if (impl_->finish) impl_->finish();
  if (wait_begin >= 0 || impl_->close_at_wait) {
    const int64_t now = timeline::now_ns();
    if (impl_->close_at_wait) {
      impl_->close_at_wait->end_ns = now;
      timeline::record(*impl_->close_at_wait);
      impl_->close_at_wait.reset();
    }
    if (wait_begin >= 0) {
      timeline::Span s;
      s.begin_ns = wait_begin;
      s.end_ns = now;
      s.name = op_id(impl_->op);
      s.group = impl_->group;
      s.kind = timeline::Kind::Wait;
      timeline::record(s);
    }
  }
}

// ---- ProcessGroup ----------------------------------------------------------------------

ProcessGroup::Impl& ProcessGroup::impl() const {
  VESCALE_CHECK(
      impl_,
      "process group: this handle is empty; create groups with dist::init or DeviceMesh::init");
  return *impl_;
}
int ProcessGroup::rank() const { return impl().rank; }
int ProcessGroup::size() const { return impl().size; }
const std::vector<int>& ProcessGroup::global_ranks() const { return impl().global_ranks; }
const std::string& ProcessGroup::name() const { return impl().name; }
Backend ProcessGroup::backend() const { return impl().kind; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl().timeout; }

namespace {

// A c10d call's work, and the timeline span to record when it is waited on (if any).
struct Issued {
  c10::intrusive_ptr<c10d::Work> work;
  std::optional<timeline::Span> close_at_wait;
  int64_t seq = 0;  // the collective's number on the group (a transfer's per peer and tag)
  int peer = -1;    // a transfer's peer, global rank
};

// What the timeline records of one call: a transfer's peer (group rank) and tag.
struct Traced {
  int64_t bytes = 0;
  int peer = -1;
  int tag = 0;
};

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return c10d::ReduceOp::SUM;  // avg = sum, then divide (Gloo has no AVG)
    case ReduceOp::Max:
      return c10d::ReduceOp::MAX;
    case ReduceOp::Min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::Product:
      return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

std::string describe(const ProcessGroup::Impl& g, const char* op) {
  return detail::cat(op, " on group '", g.name, "' (rank ", g.rank, " of ", g.size, ")");
}

void check_tensor(const ProcessGroup::Impl& g, const char* op, const char* which,
                  const at::Tensor& t) {
  VESCALE_CHECK(t.defined(), describe(g, op), ": ", which, " tensor is undefined");
  VESCALE_CHECK(t.is_contiguous(), describe(g, op), ": ", which,
                " tensor must be contiguous; call .contiguous() first");
  if (g.kind == Backend::Nccl) {
    VESCALE_CHECK(t.is_cuda(), describe(g, op), ": ", which, " tensor is on ", t.device().str(),
                  " but NCCL groups need CUDA tensors");
  } else if (g.cuda) {
    VESCALE_CHECK(t.is_cuda(), describe(g, op), ": ", which, " tensor is on ", t.device().str(),
                  " but this world's tensors are CUDA tensors (Gloo over cuda); move it with "
                  ".to(dist::device_string())");
  } else {
    VESCALE_CHECK(t.is_cpu(), describe(g, op), ": ", which, " tensor is on ", t.device().str(),
                  " but Gloo groups here take CPU tensors");
  }
}

// Gloo's send and recv hand the tensor's pointer to its TCP transport, which reads host memory:
// CUDA tensors go through a host copy (the collectives have CUDA paths of their own).
bool stage_on_host(const ProcessGroup::Impl& g) { return g.kind == Backend::Gloo && g.cuda; }

void check_rows(const ProcessGroup::Impl& g, const char* op, const at::Tensor& out, int64_t rows,
                const at::Tensor& in) {
  VESCALE_CHECK(out.dim() == in.dim() && out.dim() >= 1 && out.size(0) == rows &&
                    out.sizes().slice(1) == in.sizes().slice(1) &&
                    out.scalar_type() == in.scalar_type(),
                describe(g, op), ": output shape ", out.sizes(), " (", out.scalar_type(),
                ") does not fit input shape ", in.sizes(), " (", in.scalar_type(), "); expected ",
                rows, " rows along dim 0 and the same trailing dims and dtype");
}

Work make_work(const ProcessGroup::Impl& g, const char* op, Issued w,
               std::function<void()> finish = {}) {
  auto impl = std::make_shared<Work::Impl>();
  impl->work = std::move(w.work);
  impl->close_at_wait = std::move(w.close_at_wait);
  impl->op = op;
  impl->group = g.trace_name;
  impl->finish = std::move(finish);
  impl->timeout = g.timeout;
  impl->group_impl = g.shared_from_this();
  impl->seq = w.seq;
  impl->peer = w.peer;
  // "all_reduce #42 on group 'mesh0/dp' (rank 0 of 2)", "recv on group 'pp' (rank 1 of 2) from rank
  // 0"
  impl->what = w.peer >= 0
                   ? detail::cat(describe(g, op), std::string_view(op) == "send" ? " to" : " from",
                                 " rank ", w.peer)
                   : detail::cat(op, " #", w.seq, " on group '", g.name, "' (rank ", g.rank, " of ",
                                 g.size, ")");
  return Work(std::move(impl));
}

std::atomic<int64_t> g_all_reduce{0}, g_all_gather{0}, g_reduce_scatter{0}, g_all_to_all{0},
    g_broadcast{0}, g_send_recv{0};

void count(const char* op) {
  const std::string_view o(op);
  if (o == "all_reduce")
    ++g_all_reduce;
  else if (o == "all_gather")
    ++g_all_gather;
  else if (o == "reduce_scatter")
    ++g_reduce_scatter;
  else if (o == "all_to_all")
    ++g_all_to_all;
  else if (o == "broadcast")
    ++g_broadcast;
  else if (o == "send" || o == "recv")
    ++g_send_recv;
}

// Runs a c10d call, turning its synchronous throws (bad args, a dead peer) into our errors. Every
// call takes the group's next sequence number; with the timeline on it becomes a span from here
// to completion, recorded by Gloo's completion callback (on Gloo's thread) or when waited on.
template <typename F>
Issued call(ProcessGroup::Impl& g, const char* op, const Traced& t, F&& f) {
  count(op);
  const std::string_view o(op);
  const bool transfer = o == "send" || o == "recv";
  int64_t seq = 0;
  if (transfer) {
    std::lock_guard<std::mutex> lock(g.p2p_mu);
    seq = g.p2p_seq[{o == "send" ? 0 : 1, t.peer, t.tag}]++;
  } else {
    seq = g.seq.fetch_add(1, std::memory_order_relaxed);
  }
  const bool tracing = timeline::enabled();
  const int64_t begin = tracing ? timeline::now_ns() : 0;
  Issued out;
  out.seq = seq;
  if (transfer) out.peer = g.global_ranks.at(t.peer);
  try {
    out.work = f();
  } catch (const vescale::Error&) {
    throw;
  } catch (const std::exception& e) {
    if (mentions_timeout(e.what()))
      throw TimeoutError(describe(g, op) + " timed out: " + error_text(e));
    VESCALE_FAIL(describe(g, op), " failed: ", error_text(e));
  }
  if (!tracing) return out;
  timeline::Span s;
  s.begin_ns = begin;
  s.bytes = t.bytes;
  s.seq = seq;
  s.name = op_id(op);
  s.group = g.trace_name;
  s.context = timeline::CommContext::current();
  s.detail = timeline::CommContext::current_detail();
  if (transfer) {
    s.kind = o == "send" ? timeline::Kind::Send : timeline::Kind::Recv;
    s.lane = timeline::Lane::P2P;
    s.peer = g.global_ranks.at(t.peer);
    s.tag = t.tag;
  } else {
    s.kind = timeline::Kind::Collective;
    s.lane = timeline::Lane::Comm;
  }
  // Gloo's collectives complete a future on its thread; its transfers have none, and NCCL's
  // future completes on the stream, not on the host: those end when waited on.
  if (!transfer && g.kind == Backend::Gloo && out.work) {
    out.work->getFuture()->addCallback([s](c10::ivalue::Future&) mutable {
      s.end_ns = timeline::now_ns();
      timeline::record(s);
    });
  } else {
    out.close_at_wait = s;
  }
  return out;
}

std::function<void()> maybe_divide(ReduceOp op, at::Tensor t, int size) {
  if (op != ReduceOp::Avg) return {};
  return [t, size]() mutable { t.div_(size); };
}

void check_avg(const ProcessGroup::Impl& g, const char* op, ReduceOp r, const at::Tensor& t) {
  VESCALE_CHECK(r != ReduceOp::Avg || at::isFloatingType(t.scalar_type()), describe(g, op),
                ": avg needs a floating-point tensor, got ", t.scalar_type(),
                "; use sum and divide");
}

}  // namespace

CollectiveStats collective_stats() {
  return {g_all_reduce.load(), g_all_gather.load(), g_reduce_scatter.load(),
          g_all_to_all.load(), g_broadcast.load(),  g_send_recv.load()};
}

Work ProcessGroup::all_reduce(at::Tensor t, ReduceOp op) {
  auto& g = impl();
  check_tensor(g, "all_reduce", "input", t);
  check_avg(g, "all_reduce", op, t);
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = g.timeout;
  auto w = call(g, "all_reduce", {static_cast<int64_t>(t.nbytes())},
                [&] { return g.backend->allreduce(ts, opts); });
  return make_work(g, "all_reduce", std::move(w), maybe_divide(op, t, g.size));
}

Work ProcessGroup::all_gather(at::Tensor out, const at::Tensor& in) {
  auto& g = impl();
  check_tensor(g, "all_gather", "input", in);
  check_tensor(g, "all_gather", "output", out);
  check_rows(g, "all_gather", out, in.size(0) * g.size, in);
  c10d::AllgatherOptions opts;
  opts.timeout = g.timeout;
  // Gloo takes a list of per-rank outputs; views of `out` along dim 0 are contiguous.
  std::vector<at::Tensor> ins{in};
  std::vector<std::vector<at::Tensor>> outs{out.chunk(g.size, 0)};
  if (in.size(0) == 0) outs = {std::vector<at::Tensor>(g.size, out)};
  auto w = call(g, "all_gather", {static_cast<int64_t>(in.nbytes())}, [&] {
    if (g.kind == Backend::Nccl) {
      at::Tensor i = in;
      return g.backend->_allgather_base(out, i, opts);
    }
    return g.backend->allgather(outs, ins, opts);
  });
  return make_work(g, "all_gather", std::move(w));
}

Work ProcessGroup::all_gather_uneven(at::Tensor out, const at::Tensor& in,
                                     const std::vector<int64_t>& dim0_sizes) {
  auto& g = impl();
  VESCALE_CHECK(static_cast<int>(dim0_sizes.size()) == g.size, describe(g, "all_gather_uneven"),
                ": dim0_sizes has ", dim0_sizes.size(), " entries but the group has ", g.size,
                " ranks");
  check_tensor(g, "all_gather_uneven", "input", in);
  check_tensor(g, "all_gather_uneven", "output", out);
  VESCALE_CHECK(in.dim() >= 1 && in.size(0) == dim0_sizes[g.rank], describe(g, "all_gather_uneven"),
                ": this rank's input has ", in.dim() ? in.size(0) : 0, " rows but dim0_sizes[",
                g.rank, "] = ", dim0_sizes[g.rank]);
  const int64_t total = std::accumulate(dim0_sizes.begin(), dim0_sizes.end(), int64_t{0});
  check_rows(g, "all_gather_uneven", out, total, in);
  const int64_t max_rows = *std::max_element(dim0_sizes.begin(), dim0_sizes.end());
  // Pad every piece to the longest one, gather evenly, then pack the real rows into `out`.
  auto shape = in.sizes().vec();
  shape[0] = max_rows;
  at::Tensor padded = at::zeros(shape, in.options());
  padded.narrow(0, 0, in.size(0)).copy_(in);
  shape[0] = max_rows * g.size;
  at::Tensor gathered = at::empty(shape, in.options());
  Work inner = all_gather(gathered, padded);
  auto finish = [inner, gathered, out, dim0_sizes, max_rows]() mutable {
    inner.wait();
    int64_t row = 0;
    for (size_t r = 0; r < dim0_sizes.size(); ++r) {
      out.narrow(0, row, dim0_sizes[r]).copy_(gathered.narrow(0, r * max_rows, dim0_sizes[r]));
      row += dim0_sizes[r];
    }
  };
  return make_work(g, "all_gather_uneven", Issued{}, std::move(finish));  // the wait is in `finish`
}

Work ProcessGroup::reduce_scatter(at::Tensor out, const at::Tensor& in, ReduceOp op) {
  auto& g = impl();
  check_tensor(g, "reduce_scatter", "input", in);
  check_tensor(g, "reduce_scatter", "output", out);
  check_avg(g, "reduce_scatter", op, in);
  check_rows(g, "reduce_scatter", in, out.size(0) * g.size, out);
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = g.timeout;
  if (g.kind == Backend::Nccl) {
    at::Tensor i = in;
    auto w = call(g, "reduce_scatter", {static_cast<int64_t>(in.nbytes())},
                  [&] { return g.backend->_reduce_scatter_base(out, i, opts); });
    return make_work(g, "reduce_scatter", std::move(w), maybe_divide(op, out, g.size));
  }
  // Gloo's reduce-scatter is an all-reduce and a slice anyway (docs/architecture.md, libtorch
  // facts); do it in the open.
  at::Tensor full = in.clone();
  std::vector<at::Tensor> ts{full};
  c10d::AllreduceOptions ar;
  ar.reduceOp = opts.reduceOp;
  ar.timeout = g.timeout;
  auto w = call(g, "reduce_scatter", {static_cast<int64_t>(in.nbytes())},
                [&] { return g.backend->allreduce(ts, ar); });
  const int64_t rows = out.size(0);
  const int rank = g.rank, size = g.size;
  const bool avg = op == ReduceOp::Avg;
  return make_work(g, "reduce_scatter", std::move(w), [full, out, rows, rank, size, avg]() mutable {
    out.copy_(full.narrow(0, rank * rows, rows));
    if (avg) out.div_(size);
  });
}

Work ProcessGroup::all_to_all(at::Tensor out, const at::Tensor& in,
                              const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits) {
  auto& g = impl();
  check_tensor(g, "all_to_all", "input", in);
  check_tensor(g, "all_to_all", "output", out);
  auto check_splits = [&](const std::vector<int64_t>& s, const at::Tensor& t, const char* which) {
    if (s.empty()) {
      VESCALE_CHECK(t.dim() >= 1 && t.size(0) % g.size == 0, describe(g, "all_to_all"), ": ", which,
                    " has ", t.dim() ? t.size(0) : 0, " rows, not divisible by ", g.size,
                    "; pass explicit splits");
      return;
    }
    VESCALE_CHECK(static_cast<int>(s.size()) == g.size, describe(g, "all_to_all"), ": ", which,
                  " splits have ", s.size(), " entries; need one per rank (", g.size, ")");
    int64_t sum = 0;
    for (auto v : s) {
      VESCALE_CHECK(v >= 0, describe(g, "all_to_all"), ": negative split ", v, " in ", which);
      sum += v;
    }
    VESCALE_CHECK(t.dim() >= 1 && sum == t.size(0), describe(g, "all_to_all"), ": ", which,
                  " splits sum to ", sum, " but the tensor has ", t.dim() ? t.size(0) : 0, " rows");
  };
  check_splits(in_splits, in, "input");
  check_splits(out_splits, out, "output");
  VESCALE_CHECK(
      out.sizes().slice(1) == in.sizes().slice(1) && out.scalar_type() == in.scalar_type(),
      describe(g, "all_to_all"), ": input ", in.sizes(), " and output ", out.sizes(),
      " must share trailing dims and dtype");
  c10d::AllToAllOptions opts;
  opts.timeout = g.timeout;
  at::Tensor i = in;
  std::vector<int64_t> os = out_splits, is = in_splits;
  auto w = call(g, "all_to_all", {static_cast<int64_t>(in.nbytes())},
                [&] { return g.backend->alltoall_base(out, i, os, is, opts); });
  return make_work(g, "all_to_all", std::move(w));
}

Work ProcessGroup::broadcast(at::Tensor t, int root) {
  auto& g = impl();
  check_tensor(g, "broadcast", "input", t);
  VESCALE_CHECK(root >= 0 && root < g.size, describe(g, "broadcast"), ": root ", root,
                " is not a group rank");
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = g.timeout;
  auto w = call(g, "broadcast", {static_cast<int64_t>(t.nbytes())},
                [&] { return g.backend->broadcast(ts, opts); });
  return make_work(g, "broadcast", std::move(w));
}

Work ProcessGroup::send(const at::Tensor& t, int peer, int tag) {
  auto& g = impl();
  check_tensor(g, "send", "input", t);
  VESCALE_CHECK(peer >= 0 && peer < g.size && peer != g.rank, describe(g, "send"), ": peer ", peer,
                " must be another group rank");
  // The host copy is synchronous, so `t` may change as soon as this returns, as with NCCL.
  std::vector<at::Tensor> ts{stage_on_host(g) ? t.to(at::kCPU) : t};
  auto w = call(g, "send", {static_cast<int64_t>(t.nbytes()), peer, tag},
                [&] { return g.backend->send(ts, peer, tag); });
  return make_work(g, "send", std::move(w));
}

Work ProcessGroup::recv(at::Tensor t, int peer, int tag) {
  auto& g = impl();
  check_tensor(g, "recv", "output", t);
  VESCALE_CHECK(peer >= 0 && peer < g.size && peer != g.rank, describe(g, "recv"), ": peer ", peer,
                " must be another group rank");
  const bool staged = stage_on_host(g);
  at::Tensor host = staged ? at::empty(t.sizes(), t.options().device(at::kCPU)) : t;
  std::vector<at::Tensor> ts{host};
  auto w = call(g, "recv", {static_cast<int64_t>(t.nbytes()), peer, tag},
                [&] { return g.backend->recv(ts, peer, tag); });
  if (!staged) return make_work(g, "recv", std::move(w));
  return make_work(g, "recv", std::move(w), [t, host]() mutable { t.copy_(host); });
}

Work ProcessGroup::barrier() {
  auto& g = impl();
  c10d::BarrierOptions opts;
  opts.timeout = g.timeout;
  auto w = call(g, "barrier", {}, [&] { return g.backend->barrier(opts); });
  return make_work(g, "barrier", std::move(w));
}

// ---- construction ----------------------------------------------------------------------

ProcessGroup make_process_group(const c10::intrusive_ptr<c10d::Store>& store, const GroupSpec& spec,
                                const std::string& gloo_host) {
  // gloo_host: an address to bind, "if:<name>" for an interface, or "" for the default.
  auto impl = std::make_shared<ProcessGroup::Impl>();
  impl->rank = spec.rank;
  impl->size = static_cast<int>(spec.global_ranks.size());
  impl->global_ranks = spec.global_ranks;
  impl->name = spec.name;
  impl->trace_name = timeline::intern(spec.name);
  impl->kind = spec.kind;
  impl->cuda = spec.cuda || spec.kind == Backend::Nccl;
  impl->timeout = spec.timeout;
  impl->store = store;
  try {
    if (spec.kind == Backend::Gloo) {
      auto opts = c10d::ProcessGroupGloo::Options::create(spec.timeout);
      // One shared device (the TCP endpoint) for every group this process makes.
      static std::map<std::string, std::shared_ptr<::gloo::transport::Device>> devices;
      auto& dev = devices[gloo_host];
      if (!dev) {
        if (gloo_host.empty()) {
          dev = c10d::ProcessGroupGloo::createDefaultDevice();
        } else if (gloo_host.rfind("if:", 0) == 0) {
          dev = c10d::ProcessGroupGloo::createDeviceForInterface(gloo_host.substr(3));
        } else {
          dev = c10d::ProcessGroupGloo::createDeviceForHostname(gloo_host);
        }
      }
      opts->devices = {dev};
      impl->backend =
          c10::make_intrusive<c10d::ProcessGroupGloo>(store, spec.rank, impl->size, opts);
    } else {
#ifdef VESCALE_WITH_CUDA
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = spec.timeout;
      impl->backend =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, spec.rank, impl->size, opts);
#else
      VESCALE_FAIL("process group '", spec.name,
                   "': this build has no CUDA/NCCL; rebuild with nvcc on PATH");
#endif
    }
  } catch (const vescale::Error&) {
    throw;
  } catch (const std::exception& e) {
    VESCALE_FAIL("process group '", spec.name, "' (", to_string(spec.kind), ", rank ", spec.rank,
                 " of ", impl->size, "): could not connect all members within ",
                 spec.timeout.count(),
                 " ms; check that every rank reached this point and that the hosts can reach each "
                 "other (GLOO_SOCKET_IFNAME). (",
                 e.what(), ")");
  }
  return ProcessGroup(std::move(impl));
}

}  // namespace vescale::dist
