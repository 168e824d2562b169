// The pipeline runner (vescale/parallel/pipeline/runner.h).
#include "vescale/parallel/pipeline/runner.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "vescale/common/check.h"
#include "vescale/common/logging.h"
#include "vescale/dist/object_collectives.h"
#include "vescale/dist/world.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/kernels/linear.h"
#include "vescale/timeline/recorder.h"

namespace vescale::parallel::pipeline {
namespace {

// What a receiver needs to rebuild a tensor from its local shard: sent once per stage boundary
// (the shapes are fixed per schedule) as a fixed-size int64 header, then checked on every send.
struct TensorMeta {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> local_shape;
  bool dtensor = false;
  std::vector<int64_t> global_shape;
  dtensor::Placements placements;
  bool operator==(const TensorMeta& o) const {
    return dtype == o.dtype && local_shape == o.local_shape && dtensor == o.dtensor &&
           global_shape == o.global_shape && placements == o.placements;
  }
};

constexpr int64_t kHeaderLen = 64, kMagic = 0x76736370;  // "vscp"; one block per tensor
constexpr int64_t kMaxTensors = 4;                        // crossing one stage boundary

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string describe(const TensorMeta& m) {
  std::string out = std::string(c10::toString(m.dtype)) + " " + shape_text(m.local_shape);
  if (!m.dtensor) return out;
  out += " shard of " + shape_text(m.global_shape) + " (";
  for (size_t i = 0; i < m.placements.size(); ++i)
    out += (i ? ", " : "") + m.placements[i].to_string();
  return out + ")";
}

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.dtensor = dtensor::is_dtensor(t);
  if (m.dtensor) {
    const auto& spec = dtensor::spec_of(t);
    m.global_shape = spec.shape;
    m.placements = spec.placements;
    m.local_shape = spec.local_shape();
  } else {
    m.local_shape = t.sizes().vec();
  }
  return m;
}

at::Tensor encode(const TensorMeta& m) {
  std::vector<int64_t> h = {kMagic, static_cast<int64_t>(m.dtype), m.dtensor ? 1 : 0,
                            static_cast<int64_t>(m.local_shape.size())};
  h.insert(h.end(), m.local_shape.begin(), m.local_shape.end());
  h.push_back(static_cast<int64_t>(m.global_shape.size()));
  h.insert(h.end(), m.global_shape.begin(), m.global_shape.end());
  h.push_back(static_cast<int64_t>(m.placements.size()));
  for (const auto& p : m.placements) {
    VESCALE_CHECK(!p.is_partial(), "pipeline: cannot send a Partial tensor between stages");
    h.push_back(p.is_shard() ? 1 + p.dim : 0);
  }
  VESCALE_CHECK(static_cast<int64_t>(h.size()) <= kHeaderLen,
                "pipeline: a stage output of ", describe(m), " has too many dims to send");
  h.resize(kHeaderLen, 0);
  return at::tensor(h, at::kLong);
}

TensorMeta decode(const at::Tensor& header) {
  const at::Tensor h = header.cpu().contiguous();
  const int64_t* p = h.data_ptr<int64_t>();
  VESCALE_CHECK(p[0] == kMagic, "pipeline: the header of a stage transfer is corrupt (", p[0],
                "); do all ranks run the same build and schedule?");
  TensorMeta m;
  int64_t i = 1;
  m.dtype = static_cast<at::ScalarType>(p[i++]);
  m.dtensor = p[i++] != 0;
  for (int64_t n = p[i++]; n > 0; --n) m.local_shape.push_back(p[i++]);
  for (int64_t n = p[i++]; n > 0; --n) m.global_shape.push_back(p[i++]);
  for (int64_t n = p[i++]; n > 0; --n) {
    const int64_t code = p[i++];
    m.placements.push_back(code == 0 ? dtensor::Replicate() : dtensor::Shard(code - 1));
  }
  return m;
}

enum Channel : int { kActivation = 0, kGrad = 1, kHeader = 2 };

// Several tensors' headers in one: [count, then kHeaderLen per tensor].
at::Tensor encode_all(const std::vector<TensorMeta>& metas) {
  VESCALE_CHECK(metas.size() <= static_cast<size_t>(kMaxTensors), "pipeline: a stage passes ",
                metas.size(), " tensors on; at most ", kMaxTensors);
  at::Tensor h = at::zeros({1 + kMaxTensors * kHeaderLen}, at::kLong);
  h[0] = static_cast<int64_t>(metas.size());
  for (size_t i = 0; i < metas.size(); ++i)
    h.narrow(0, 1 + static_cast<int64_t>(i) * kHeaderLen, kHeaderLen).copy_(encode(metas[i]));
  return h;
}

std::vector<TensorMeta> decode_all(const at::Tensor& header) {
  const at::Tensor h = header.cpu();
  const int64_t n = h[0].item<int64_t>();
  VESCALE_CHECK(n >= 1 && n <= kMaxTensors, "pipeline: the header of a stage transfer is corrupt");
  std::vector<TensorMeta> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(decode(h.narrow(0, 1 + i * kHeaderLen, kHeaderLen)));
  return out;
}

}  // namespace

using Tensors = std::vector<at::Tensor>;

struct PipelineRunner::Impl {
  Schedule schedule;
  int world_rank = 0;
  dist::ProcessGroup pp;
  int me = 0;  // pp rank
  std::map<int, StageForward> stages;
  std::optional<mesh::DeviceMesh> stage_mesh;
  RunnerOptions options;
  std::string device = "cpu";
  // Per local stage: the micro-batch of its last B or I, and of its last W, in this rank's list.
  std::map<int, int> last_bi, last_w;

  // Fixed per boundary after the first step: the meta of stage s's outputs (sent or received).
  std::map<int, std::vector<TensorMeta>> output_meta;

  // One step's state.
  struct Slot {
    Tensors input, output, in_grad;
    at::Tensor loss;
  };
  std::map<std::pair<int, int>, Slot> slots;
  struct Pending {
    dist::Work work;
    at::Tensor buffer;
  };
  std::map<std::tuple<int, int, int, int>, Pending> recvs;  // (channel, stage, mb, tensor)
  // A transfer: (channel, the receiving stage, micro-batch). Each has one sender and one
  // consumer; where they are in their ranks' action lists (the Send, and the F, B or I that takes
  // it) says when a send is surely finished: once its peer has sent this rank something from a
  // later action than the one that consumed it.
  using Transfer = std::tuple<int, int, int>;
  std::map<Transfer, int> sent_at, consumed_at;
  struct Sent {
    dist::Work work;
    at::Tensor tensor;  // kept alive until the send is finished
    int peer = 0;
    int consumed_at = std::numeric_limits<int>::max();  // unknown: finished at the step's end
  };
  std::vector<Sent> sends;
  std::mutex tasks_mu;
  std::map<std::pair<int, int>, std::vector<kernels::WeightGradTask>> weight_tasks;
  at::Tensor loss_sum;
  RunnerStats stats;
  int64_t live = 0;
  bool training = true;
  const Action* doing = nullptr;  // for error messages
  double waited_s = 0;            // receive waits inside the current action
  std::vector<uint32_t> action_names;  // the timeline's span names, per action of this rank
  void reset();  // drops a failed step's state

  int tag(Channel c, int stage, int mb, int tensor = 0) const {
    // Distinct per transfer of a step (Gloo matches by tag; NCCL by order).
    return 1 + ((static_cast<int>(c) * kMaxTensors + tensor) * schedule.stages + stage) * 65536 +
           mb % 65536;
  }
  int peer_of(int stage) const { return schedule.stage_rank.at(stage); }
  std::string who(int peer) const {
    return "pipeline rank " + std::to_string(peer) + " (world rank " +
           std::to_string(pp.global_ranks().at(peer)) + ")";
  }

  void wait(dist::Work& w, const std::string& what, int peer) {
    const auto start = std::chrono::steady_clock::now();
    try {
      w.wait();
      waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const TimeoutError& e) {
      throw waited_in_vain(what + " from " + who(peer), e);
    }
  }
  // A timeout, naming this rank and what it waited for.
  TimeoutError waited_in_vain(const std::string& what, const TimeoutError& e) const {
    return TimeoutError("pipeline: rank " + std::to_string(world_rank) + " waited in vain for " +
                        what + ", which hung or failed: " + e.what());
  }

  Tensors wrap_all(const Tensors& locals, const std::vector<TensorMeta>& metas) const {
    Tensors out;
    for (size_t i = 0; i < locals.size(); ++i) out.push_back(wrap(locals[i], metas.at(i)));
    return out;
  }
  at::Tensor wrap(const at::Tensor& local, const TensorMeta& m) const {
    if (!m.dtensor) return local;
    VESCALE_CHECK(stage_mesh, "pipeline: a DTensor arrived at a stage without a mesh");
    return dtensor::from_local(local, *stage_mesh, m.placements, m.global_shape);
  }
  static at::Tensor local_of(const at::Tensor& t) {
    return (dtensor::is_dtensor(t) ? dtensor::to_local(t) : t).contiguous();
  }

  void post_recv(Channel c, int stage, int mb, int peer, const std::vector<TensorMeta>& metas) {
    for (size_t i = 0; i < metas.size(); ++i) {
      const TensorMeta& m = metas[i];
      at::Tensor buffer =
          at::empty(m.local_shape, at::TensorOptions().dtype(m.dtype).device(at::Device(device)));
      const int k = static_cast<int>(i);
      dist::Work w = pp.recv(buffer, peer, tag(c, stage, mb, k));
      recvs[{c, stage, mb, k}] = {std::move(w), buffer};
      ++stats.recvs;
    }
  }
  Tensors take_recv(Channel c, int stage, int mb, size_t n, const std::string& what, int peer) {
    Tensors out;
    for (size_t i = 0; i < n; ++i) {
      auto it = recvs.find({c, stage, mb, static_cast<int>(i)});
      VESCALE_CHECK(it != recvs.end(), "pipeline: no receive posted for ", what,
                    " (the schedule was validated; this is a bug)");
      Pending p = std::move(it->second);
      recvs.erase(it);
      wait(p.work, what, peer);
      out.push_back(p.buffer);
    }
    // (Evaluation runs its own order, not the lists the indices come from.)
    if (auto it = training ? sent_at.find({c, stage, mb}) : sent_at.end(); it != sent_at.end())
      drop_finished_sends(peer, it->second);
    return out;
  }
  void send(const at::Tensor& local, int peer, int t, std::optional<Transfer> transfer) {
    Sent sent{pp.send(local, peer, t), local, peer};
    if (auto it = transfer && training ? consumed_at.find(*transfer) : consumed_at.end();
        it != consumed_at.end())
      sent.consumed_at = it->second;
    sends.push_back(std::move(sent));
    ++stats.sends;
    stats.peak_sends_held = std::max(stats.peak_sends_held, static_cast<int64_t>(sends.size()));
  }
  // Each sent tensor is freed once its send is finished, not at the step's end, where every
  // micro-batch's stage output (or input gradient) would still be held: M of them. Finished:
  // the backend says so (NCCL's events; Gloo's sends say so only when waited on), or `peer` has
  // just sent this rank a transfer from its action `peer_action`, later than the one that
  // consumed the send. Waiting on those returns at once, and rethrows a failed send's error.
  void drop_finished_sends(int peer = -1, int peer_action = -1) {
    std::erase_if(sends, [&](Sent& s) {
      if (!s.work.is_completed() && !(s.peer == peer && s.consumed_at < peer_action)) return false;
      s.work.wait();
      return true;
    });
  }

  std::string mb_text(int stage, int mb) const {
    return "stage " + std::to_string(stage) + " micro-batch " + std::to_string(mb);
  }

  void recv_activation(int s, int m) {
    const int peer = peer_of(s - 1);
    if (!output_meta.count(s - 1)) {
      at::Tensor header = at::empty({1 + kMaxTensors * kHeaderLen},
                                    at::TensorOptions().dtype(at::kLong).device(at::Device(device)));
      dist::Work w = pp.recv(header, peer, tag(kHeader, s, 0));
      wait(w, "the activation header of " + mb_text(s, m), peer);
      output_meta[s - 1] = decode_all(header);
    }
    post_recv(kActivation, s, m, peer, output_meta.at(s - 1));
  }

  void send_activation(int s, int m) {
    const Tensors& outs = slots.at({s, m}).output;
    std::vector<TensorMeta> metas;
    for (const auto& t : outs) metas.push_back(meta_of(t));
    const int peer = peer_of(s + 1);
    auto known = output_meta.find(s);
    if (known == output_meta.end()) {
      send(encode_all(metas).to(at::Device(device)), peer, tag(kHeader, s + 1, 0), std::nullopt);
      output_meta[s] = metas;
    } else {
      for (size_t i = 0; i < metas.size(); ++i)
        VESCALE_CHECK(i < known->second.size() && known->second[i] == metas[i], "pipeline: stage ",
                      s, "'s output ", i, " of micro-batch ", m, " is ", describe(metas[i]),
                      " but was ", i < known->second.size() ? describe(known->second[i]) : "absent",
                      "; a pipeline needs the same shapes every micro-batch (fixed "
                      "train.seq_len and train.batch_size)");
    }
    for (size_t i = 0; i < outs.size(); ++i)
      send(local_of(outs[i].detach()), peer, tag(kActivation, s + 1, m, static_cast<int>(i)),
           Transfer{kActivation, s + 1, m});
  }

  void forward(int s, int m, const Input& input, const Loss& loss) {
    Tensors x;
    if (s == 0) {
      x = {input(m)};
    } else {
      if (peer_of(s - 1) == me) {
        x = slots.at({s - 1, m}).output;
      } else {
        const std::string what = "the activation of " + mb_text(s, m);
        x = wrap_all(take_recv(kActivation, s, m, output_meta.at(s - 1).size(), what, peer_of(s - 1)),
                     output_meta.at(s - 1));
      }
      // Leaves of this stage's graph; floating tensors only carry gradients.
      for (auto& t : x) {
        t = t.detach();
        if (training && t.is_floating_point()) t.requires_grad_(true);
      }
    }
    Tensors out = stages.at(s).forward(x);
    Slot& slot = slots[{s, m}];
    if (s == schedule.stages - 1) {
      at::Tensor l = loss(out, m);
      loss_sum = loss_sum.defined() ? loss_sum + l.detach() : l.detach();
      slot.loss = l;
    } else {
      slot.output = out;
    }
    if (training) {
      slot.input = x;
      stats.peak_live = std::max(stats.peak_live, ++live);
    }
  }

  void recv_grad(int s, int m) {
    post_recv(kGrad, s, m, peer_of(s + 1), output_meta.at(s));  // known: this rank sent them
  }

  // B or I: the gradient of the stage's input, from the loss or its output's gradient.
  void backward(int s, int m, bool split) {
    Slot& slot = slots.at({s, m});
    // The last B (or I: the parameters outside linear layers, norms and embeddings, get their
    // gradients in I) of the stage in this step: the buckets may launch.
    if (options.set_grad_sync) options.set_grad_sync(last_bi.at(s) == m);
    if (split) {
      kernels::set_weight_grad_sink([this, s, m](kernels::WeightGradTask t) {
        std::lock_guard<std::mutex> lock(tasks_mu);
        weight_tasks[{s, m}].push_back(std::move(t));
      });
    }
    try {
      if (s == schedule.stages - 1) {
        (slot.loss / static_cast<double>(schedule.microbatches)).backward();
      } else {
        Tensors g;
        if (peer_of(s + 1) == me) {
          g = slots.at({s + 1, m}).in_grad;
        } else {
          const std::string what = "the gradient of " + mb_text(s, m);
          g = wrap_all(take_recv(kGrad, s, m, slot.output.size(), what, peer_of(s + 1)),
                       output_meta.at(s));
        }
        Tensors outs, grads;
        for (size_t i = 0; i < slot.output.size(); ++i)
          if (slot.output[i].requires_grad()) outs.push_back(slot.output[i]), grads.push_back(g.at(i));
        torch::autograd::backward(outs, grads);
      }
    } catch (...) {
      if (split) kernels::set_weight_grad_sink({});
      throw;
    }
    if (split) kernels::set_weight_grad_sink({});
    if (s > 0) {
      slot.in_grad.clear();
      for (const auto& in : slot.input) {
        at::Tensor g = in.grad();
        if (!g.defined()) g = at::zeros_like(in);
        // A Partial gradient (a replicated activation feeding column-parallel layers) is summed
        // here, so the previous stage gets its input's layout.
        if (dtensor::is_dtensor(g) && dtensor::spec_of(g).placements != dtensor::spec_of(in).placements)
          g = dtensor::redistribute(g, dtensor::spec_of(in).placements);
        slot.in_grad.push_back(g);
      }
    }
    slot.output.clear();
    slot.loss = at::Tensor();
    slot.input.clear();
    if (!split) release(s, m);
  }

  void backward_weight(int s, int m) {
    if (options.set_grad_sync) options.set_grad_sync(last_w.at(s) == m);
    std::vector<kernels::WeightGradTask> tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu);
      auto it = weight_tasks.find({s, m});
      if (it != weight_tasks.end()) {
        tasks = std::move(it->second);
        weight_tasks.erase(it);
      }
    }
    for (auto& t : tasks) t();
    release(s, m);
  }

  void send_grad(int s, int m) {
    Slot& slot = slots.at({s, m});
    for (size_t i = 0; i < slot.in_grad.size(); ++i)
      send(local_of(slot.in_grad[i]), peer_of(s - 1), tag(kGrad, s - 1, m, static_cast<int>(i)),
           Transfer{kGrad, s - 1, m});
    slot.in_grad.clear();
  }

  void release(int s, int m) {
    --live;
    auto it = slots.find({s, m});
    // Keep the slot while the next local stage (same rank) still reads its input gradient.
    if (it != slots.end() && it->second.in_grad.empty()) slots.erase(it);
  }

  void finish_step() {
    for (auto& s : sends) {
      try {
        s.work.wait();
      } catch (const TimeoutError& e) {
        throw waited_in_vain(who(s.peer) + " to receive what this step sent it", e);
      }
    }
    sends.clear();
    VESCALE_CHECK(recvs.empty(), "pipeline: ", recvs.size(),
                  " receives were still open after the step's last action");
    slots.clear();
    weight_tasks.clear();
    live = 0;
  }
};

PipelineRunner::PipelineRunner(Schedule schedule, const mesh::DeviceMesh& mesh,
                               const std::string& pp_dim, std::vector<StageForward> stages,
                               const mesh::DeviceMesh* stage_mesh, RunnerOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& r = *impl_;
  r.schedule = std::move(schedule);
  r.world_rank = mesh.rank();
  r.pp = mesh.group(pp_dim);
  r.me = r.pp.rank();
  r.options = std::move(options);
  r.device = mesh.device_type() == "cuda" ? dist::device_string() : "cpu";
  if (stage_mesh) r.stage_mesh = *stage_mesh;
  VESCALE_CHECK(r.schedule.ranks == r.pp.size(), "pipeline: the schedule is for ", r.schedule.ranks,
                " pipeline ranks but mesh dim '", pp_dim, "' has ", r.pp.size());
  for (auto& s : stages) r.stages.emplace(s.stage, std::move(s));
  for (int s : r.schedule.stages_of(r.me))
    VESCALE_CHECK(r.stages.count(s), "pipeline: pipeline rank ", r.me, " runs stage ", s,
                  " but was given no forward for it");

  // Every peer must run the lists this rank made for it: a different config on one rank would
  // otherwise deadlock at the first mismatched transfer.
  const std::string mine = std::string(to_string(r.schedule.kind)) + "/" + std::to_string(r.schedule.stages) + "/" +
                           std::to_string(r.schedule.microbatches) + ": " +
                           serialize(r.schedule.actions.at(r.me));
  const auto all = dist::all_gather_text(mine);
  for (int q = 0; q < r.pp.size(); ++q) {
    const int world = r.pp.global_ranks()[q];
    const std::string expect = std::string(to_string(r.schedule.kind)) + "/" + std::to_string(r.schedule.stages) + "/" +
                               std::to_string(r.schedule.microbatches) + ": " +
                               serialize(r.schedule.actions.at(q));
    VESCALE_CHECK(all.at(world) == expect, "pipeline: world rank ", world, " (pipeline rank ", q,
                  ") runs another schedule than world rank ", mesh.rank(),
                  " expects for it; every rank needs the same config and plan. It runs: ",
                  all.at(world).substr(0, 200));
  }
  validate(r.schedule);

  for (const Action& a : r.schedule.actions.at(r.me)) {
    if (a.op == Op::Backward || a.op == Op::BackwardInput) r.last_bi[a.stage] = a.microbatch;
    if (a.op == Op::BackwardWeight) r.last_w[a.stage] = a.microbatch;
  }
  for (int q = 0; q < r.schedule.ranks; ++q) {
    const auto& actions = r.schedule.actions.at(q);
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const Action& a = actions[i];
      const int s = a.stage, m = a.microbatch;
      if (a.op == Op::SendActivation) r.sent_at[{kActivation, s + 1, m}] = i;
      if (a.op == Op::SendGrad) r.sent_at[{kGrad, s - 1, m}] = i;
      if (a.op == Op::Forward && s > 0 && r.peer_of(s - 1) != q)
        r.consumed_at[{kActivation, s, m}] = i;
      if ((a.op == Op::Backward || a.op == Op::BackwardInput) && s + 1 < r.schedule.stages &&
          r.peer_of(s + 1) != q)
        r.consumed_at[{kGrad, s, m}] = i;
    }
  }

  // Open the links to both neighbours now, in a fixed order (NCCL creates a pair's
  // communicator at its first transfer; doing it here keeps it out of the schedule).
  if (r.pp.size() > 1) {
    const int next = (r.me + 1) % r.pp.size(), prev = (r.me + r.pp.size() - 1) % r.pp.size();
    auto opts = at::TensorOptions().dtype(at::kFloat).device(at::Device(r.device));
    at::Tensor out = at::full({1}, static_cast<double>(r.me), opts), in = at::empty({1}, opts);
    dist::Work s = r.pp.send(out, next, 0);
    dist::Work v = r.pp.recv(in, prev, 0);
    r.wait(v, "the link check", prev);
    r.wait(s, "the link check", next);
    VESCALE_CHECK(in.item<double>() == prev, "pipeline: the link check from ", r.who(prev),
                  " carried ", in.item<double>());
  }
  kernels::set_split_weight_grad(r.schedule.splits_backward());
}

PipelineRunner::~PipelineRunner() {
  if (impl_ && impl_->schedule.splits_backward()) kernels::set_split_weight_grad(false);
}

at::Tensor PipelineRunner::train_step(const Input& input, const Loss& loss) {
  Impl& r = *impl_;
  r.training = true;
  r.loss_sum = at::Tensor();
  r.stats = {};
  using Clock = std::chrono::steady_clock;
  const auto step_start = Clock::now();
  try {
    const auto& actions = r.schedule.actions.at(r.me);
    if (timeline::enabled() && r.action_names.empty()) {  // once: no lock per action
      for (const Action& a : actions)
        r.action_names.push_back(timeline::intern(to_string(a)));  // "F3@s1"
    }
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      r.doing = &a;
      const auto start = Clock::now();
      std::optional<timeline::Scope> span;
      if (a.op == Op::Forward || a.op == Op::Backward || a.op == Op::BackwardInput ||
          a.op == Op::BackwardWeight)
        span.emplace(timeline::Kind::Pipeline, r.action_names.empty() ? 0 : r.action_names[i]);
      switch (a.op) {
        case Op::Forward: r.forward(a.stage, a.microbatch, input, loss); break;
        case Op::Backward: r.backward(a.stage, a.microbatch, false); break;
        case Op::BackwardInput: r.backward(a.stage, a.microbatch, true); break;
        case Op::BackwardWeight: r.backward_weight(a.stage, a.microbatch); break;
        case Op::SendActivation: r.send_activation(a.stage, a.microbatch); break;
        case Op::RecvActivation: r.recv_activation(a.stage, a.microbatch); break;
        case Op::SendGrad: r.send_grad(a.stage, a.microbatch); break;
        case Op::RecvGrad: r.recv_grad(a.stage, a.microbatch); break;
      }
      r.drop_finished_sends();
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      // A compute action's own receive wait counts as bubble, not as compute.
      const double busy = std::max(0.0, secs - r.waited_s);
      r.waited_s = 0;
      if (a.op == Op::Forward) r.stats.forward_s += busy, ++r.stats.forwards;
      if (a.op == Op::Backward || a.op == Op::BackwardInput) r.stats.backward_s += busy, ++r.stats.backwards;
      if (a.op == Op::BackwardWeight) r.stats.weight_s += busy, ++r.stats.weights;
    }
    r.doing = nullptr;
    r.finish_step();
    r.stats.step_s = std::chrono::duration<double>(Clock::now() - step_start).count();
  } catch (const TimeoutError&) {
    r.reset();
    throw;
  } catch (const std::exception& e) {
    r.reset();
    // Name the action: "pipeline rank 1, F3@s2: <what failed>".
    if (r.doing == nullptr) throw;
    throw Error("pipeline rank " + std::to_string(r.me) + ", " + to_string(*r.doing) + ": " +
                e.what());
  }
  return r.loss_sum;
}

void PipelineRunner::Impl::reset() {
  {
    kernels::set_weight_grad_sink({});
    sends.clear();
    recvs.clear();
    slots.clear();
    weight_tasks.clear();
    live = 0;
  }
}

at::Tensor PipelineRunner::eval_step(const Input& input, const Loss& loss, int microbatches) {
  Impl& r = *impl_;
  c10::NoGradGuard no_grad;
  r.training = false;
  r.loss_sum = at::Tensor();
  const auto local = r.schedule.stages_of(r.me);
  try {
    // Micro-batch by micro-batch, each local stage in order: the stages downstream only wait
    // on ones upstream, and sends do not block, so this cannot deadlock.
    for (int m = 0; m < microbatches; ++m) {
      for (int s : local) {
        if (s > 0 && r.peer_of(s - 1) != r.me) r.recv_activation(s, m);
        r.forward(s, m, input, loss);
        if (s + 1 < r.schedule.stages && r.peer_of(s + 1) != r.me) r.send_activation(s, m);
      }
      for (int s : local) r.slots.erase({s, m});
    }
    r.finish_step();
  } catch (...) {
    r.reset();
    throw;
  }
  return r.loss_sum;
}

const Schedule& PipelineRunner::schedule() const { return impl_->schedule; }
bool PipelineRunner::runs_last_stage() const {
  return impl_->schedule.stage_rank.back() == impl_->me;
}
int PipelineRunner::pp_rank() const { return impl_->me; }
const RunnerStats& PipelineRunner::last_step() const { return impl_->stats; }

}  // namespace vescale::parallel::pipeline
