#include "dtensor/redistribute.h"

#include <ATen/ATen.h>

#include <atomic>
#include <mutex>
#include <string>

#include "vescale/common/check.h"
#include "vescale/dtensor/dtensor.h"
#include "vescale/timeline/recorder.h"

namespace vescale::dtensor {

namespace {

std::atomic<bool> g_log_on{false};
std::mutex g_log_mu;
std::map<std::string, int64_t> g_log;

dist::ProcessGroup& group_of(const DTensorSpec& s, int64_t m) {
  return s.mesh.group(s.mesh.dim_names()[m]);
}

// Size of tensor dim `d` as seen by mesh dim `m`'s group: the global size chunked by the mesh
// dims before m that shard d under `p`.
int64_t size_before(const DTensorSpec& s, const Placements& p, int64_t d, int64_t m) {
  int64_t size = s.shape[d];
  const auto& coord = s.mesh.coordinate();
  for (int64_t i = 0; i < m; ++i)
    if (p[i].is_shard(d)) size = chunk_range(size, s.mesh.shape().sizes()[i], coord[i]).size;
  return size;
}

std::vector<int64_t> chunk_sizes(int64_t size, int64_t k) {
  std::vector<int64_t> out(k);
  for (int64_t q = 0; q < k; ++q) out[q] = chunk_range(size, k, q).size;
  return out;
}

at::Tensor all_gather_dim(const at::Tensor& t, int64_t d, int64_t full, dist::ProcessGroup& g) {
  auto sizes = chunk_sizes(full, g.size());
  at::Tensor x = t.movedim(d, 0).contiguous();
  auto shape = x.sizes().vec();
  shape[0] = full;
  at::Tensor out = at::empty(shape, x.options());
  bool even = full % g.size() == 0;
  (even ? g.all_gather(out, x) : g.all_gather_uneven(out, x, sizes)).wait();
  return out.movedim(0, d);
}

at::Tensor slice_dim(const at::Tensor& t, int64_t d, int64_t k, int64_t index) {
  auto r = chunk_range(t.size(d), k, index);
  return t.narrow(d, r.offset, r.size);
}

at::Tensor reduce_scatter_dim(const at::Tensor& t, int64_t d, dist::ReduceOp op,
                              dist::ProcessGroup& g) {
  const int64_t k = g.size(), size = t.size(d), chunk = (size + k - 1) / k;
  at::Tensor x = t.movedim(d, 0).contiguous();
  if (chunk * k != size) {  // pad to k equal pieces; the padded rows are dropped after
    auto pad_shape = x.sizes().vec();
    pad_shape[0] = chunk * k - size;
    x = at::cat({x, at::zeros(pad_shape, x.options())}, 0);
  }
  auto shape = x.sizes().vec();
  shape[0] = chunk;
  at::Tensor out = at::empty(shape, x.options());
  g.reduce_scatter(out, x, op).wait();
  auto mine = chunk_range(size, k, g.rank());
  return out.narrow(0, 0, mine.size).movedim(0, d);
}

at::Tensor all_reduce_copy(const at::Tensor& t, dist::ReduceOp op, dist::ProcessGroup& g) {
  at::Tensor x = t.clone(at::MemoryFormat::Contiguous);
  g.all_reduce(x, op).wait();
  return x;
}

// Shard(i) -> Shard(j) over one group: each rank sends its piece of every j-chunk to that
// chunk's owner and stitches what it receives along i.
at::Tensor all_to_all_dims(const at::Tensor& t, int64_t i, int64_t j, int64_t full_i,
                           dist::ProcessGroup& g) {
  const int64_t k = g.size(), me = g.rank(), full_j = t.size(j);
  auto i_sizes = chunk_sizes(full_i, k);
  std::vector<at::Tensor> send;
  std::vector<int64_t> in_splits(k), out_splits(k);
  std::vector<std::vector<int64_t>> recv_shapes(k);
  for (int64_t q = 0; q < k; ++q) {
    auto piece = slice_dim(t, j, k, q).contiguous();
    in_splits[q] = piece.numel();
    send.push_back(piece.reshape({-1}));
    auto shape = t.sizes().vec();
    shape[i] = i_sizes[q];
    shape[j] = chunk_range(full_j, k, me).size;
    recv_shapes[q] = shape;
    out_splits[q] = c10::multiply_integers(shape);
  }
  at::Tensor in = at::cat(send);
  int64_t total = 0;
  for (auto n : out_splits) total += n;
  at::Tensor out = at::empty({total}, t.options());
  g.all_to_all(out, in, out_splits, in_splits).wait();
  std::vector<at::Tensor> pieces;
  int64_t off = 0;
  for (int64_t q = 0; q < k; ++q) {
    pieces.push_back(out.narrow(0, off, out_splits[q]).view(recv_shapes[q]));
    off += out_splits[q];
  }
  return at::cat(pieces, i);
}

}  // namespace

at::Tensor redistribute_local(const at::Tensor& local, const DTensorSpec& src,
                              const Placements& dst_in) {
  static const uint32_t kName = timeline::intern("redistribute");
  timeline::Scope span(timeline::Kind::Redistribute, kName);
  timeline::CommContext context(kName);
  const int64_t nm = src.mesh.ndim(), nd = src.ndim();
  VESCALE_CHECK(static_cast<int64_t>(dst_in.size()) == nm, "redistribute: ", dst_in.size(),
                " placements ", to_string(dst_in), " for a ", nm, "-D mesh");
  Placements dst = dst_in;
  for (auto& p : dst) {
    if (!p.is_shard()) continue;
    const int64_t orig = p.dim;
    if (p.dim < 0) p.dim += nd;
    VESCALE_CHECK(p.dim >= 0 && p.dim < nd, "redistribute: Shard(", orig,
                  ") is out of range for a ", nd, "-D tensor");
  }
  if (src.placements == dst) return local;

  const auto& coord = src.mesh.coordinate();
  const auto& msizes = src.mesh.shape().sizes();
  Placements cur = src.placements;
  at::Tensor t = local;

  // For each tensor dim, the mesh dims sharding it now and after, in mesh order. The common
  // prefix stays; the rest of `now` is unsharded and the rest of `after` sharded afresh.
  auto sharding = [&](const Placements& p, int64_t d) {
    std::vector<int64_t> out;
    for (int64_t m = 0; m < nm; ++m)
      if (p[m].is_shard(d)) out.push_back(m);
    return out;
  };
  std::vector<bool> unshard(nm, false);
  std::vector<int64_t> first_new(nd, -1);  // first mesh dim that newly shards d
  for (int64_t d = 0; d < nd; ++d) {
    auto now = sharding(cur, d), after = sharding(dst, d);
    size_t keep = 0;
    while (keep < now.size() && keep < after.size() && now[keep] == after[keep]) ++keep;
    for (size_t x = keep; x < now.size(); ++x) unshard[now[x]] = true;
    if (keep < after.size()) first_new[d] = after[keep];
  }

  // A: unshard, innermost mesh dim first.
  for (int64_t m = nm - 1; m >= 0; --m) {
    if (!unshard[m]) continue;
    const int64_t i = cur[m].dim;
    auto& g = group_of(src, m);
    const int64_t full = size_before(src, cur, i, m);
    if (dst[m].is_shard() && dst[m].dim != i) {
      const int64_t j = dst[m].dim;
      // One group moves the split from i to j when nothing else shards i or j.
      if (sharding(cur, i) == std::vector<int64_t>{m} && sharding(cur, j).empty() &&
          sharding(dst, j) == std::vector<int64_t>{m} && sharding(dst, i).empty()) {
        t = all_to_all_dims(t, i, j, full, g);
        cur[m] = dst[m];
        first_new[j] = -1;
        continue;
      }
    }
    t = all_gather_dim(t, i, full, g);
    cur[m] = Placement::replicate();
  }

  // B: resolve partials.
  for (int64_t m = 0; m < nm; ++m) {
    if (!cur[m].is_partial() || cur[m] == dst[m]) continue;
    auto& g = group_of(src, m);
    if (dst[m].is_shard() && first_new[dst[m].dim] == m) {
      t = reduce_scatter_dim(t, dst[m].dim, cur[m].reduce, g);  // straight into the shard
      cur[m] = dst[m];
      continue;
    }
    t = all_reduce_copy(t, cur[m].reduce, g);
    cur[m] = Placement::replicate();
  }

  // C: shard and re-partial, outermost mesh dim first (so nested shards chunk in mesh order).
  for (int64_t m = 0; m < nm; ++m) {
    if (cur[m] == dst[m]) continue;
    VESCALE_CHECK(cur[m].is_replicate(), "redistribute: internal: mesh dim ", m, " is ",
                  cur[m].to_string(), " on the way from ", to_string(src.placements), " to ",
                  to_string(dst));
    if (dst[m].is_shard()) {
      t = slice_dim(t, dst[m].dim, msizes[m], coord[m]);
    } else if (dst[m].is_partial()) {
      // Sum: one rank of the group keeps the value. avg/max/min: every rank holds it.
      if (dst[m].reduce == dist::ReduceOp::Sum && coord[m] != 0) t = at::zeros_like(t);
    }
    cur[m] = dst[m];
  }
  return t.is_contiguous() ? t : t.contiguous();
}

void set_redistribution_log(bool on) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (on) g_log.clear();
  g_log_on = on;
}

std::map<std::string, int64_t> redistribution_log() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  return g_log;
}

void log_redistribution(const char* label, int64_t arg, const Placements& src,
                        const Placements& dst) {
  if (!g_log_on.load(std::memory_order_relaxed)) return;
  std::string key = label;
  if (arg >= 0) key += " arg " + std::to_string(arg);
  key += ": " + to_string(src) + " -> " + to_string(dst);
  std::lock_guard<std::mutex> lock(g_log_mu);
  ++g_log[key];
}

}  // namespace vescale::dtensor
