#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "vescale/common/check.h"

namespace vescale::tokenizer {

namespace {
// Pieces up to this many symbols merge by scanning for the lowest rank (fast for words); longer
// ones (long runs of spaces or digits) go through a heap, O(n log n).
constexpr size_t kScanMax = 128;
// HF caches pieces shorter than 256 bytes; so do we, and restart a cache past these sizes.
constexpr size_t kCacheMaxPiece = 256, kCacheMaxEntries = 1 << 17, kCacheMaxIds = 1 << 22;
}  // namespace

BpeModel::BpeModel(const BpeModelSpec& spec, const std::string& source)
    : fuse_unk_(spec.fuse_unk), ignore_merges_(spec.ignore_merges) {
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  std::unordered_map<std::string_view, int64_t> by_string;
  by_string.reserve(spec.vocab.size());
  for (const auto& [token, id] : spec.vocab) {
    by_string.emplace(token, id);
    // Tokens outside the byte-level alphabet can never be made from bytes; only decode sees them.
    if (auto raw = byte_level_to_bytes(token)) {
      vocab_.insert(*raw, static_cast<int32_t>(id));
      if (raw->size() == 1) byte_id_[static_cast<uint8_t>((*raw)[0])] = static_cast<int32_t>(id);
    }
  }
  if (spec.unk_token) {
    auto it = by_string.find(*spec.unk_token);
    VESCALE_CHECK(it != by_string.end(), source, ": model.unk_token '", *spec.unk_token,
                  "' is not in model.vocab; add it there or set unk_token to null");
    unk_id_ = static_cast<int32_t>(it->second);
  }
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string &a = spec.merges[rank].first, &b = spec.merges[rank].second;
    auto find = [&](const std::string& token, const char* what) {
      auto it = by_string.find(token);
      VESCALE_CHECK(it != by_string.end(), source, ": model.merges[", rank, "] ('", a, "', '", b,
                    "'): its ", what, " '", token,
                    "' is not in model.vocab; the merges and the "
                    "vocabulary come from different tokenizers");
      return static_cast<uint32_t>(it->second);
    };
    const uint32_t left = find(a, "left token"), right = find(b, "right token"),
                   made = find(a + b, "merged token");
    merges_.insert(left, right, {static_cast<uint32_t>(rank), made});
  }
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int64_t>& out,
                            BpeScratch& s) const {
  if (piece.empty()) return;
  const uint64_t h = hash_bytes(piece);
  if (ignore_merges_) {
    if (const int32_t* id = vocab_.find(piece, h)) {
      out.push_back(*id);
      return;
    }
  }
  if (const auto* hit = s.cache.find(piece, h)) {
    out.insert(out.end(), s.cache_ids.begin() + hit->off,
               s.cache_ids.begin() + hit->off + hit->len);
    return;
  }
  merge(piece, s);
  out.insert(out.end(), s.ids.begin(), s.ids.end());
  if (piece.size() < kCacheMaxPiece) {
    if (s.cache.size() >= kCacheMaxEntries || s.cache_ids.size() >= kCacheMaxIds) {
      s.cache.clear();
      s.cache_ids.clear();
    }
    s.cache.insert(
        piece, h, {static_cast<uint32_t>(s.cache_ids.size()), static_cast<uint32_t>(s.ids.size())});
    s.cache_ids.insert(s.cache_ids.end(), s.ids.begin(), s.ids.end());
  }
}

void BpeModel::merge(std::string_view piece, BpeScratch& s) const {
  // One symbol per byte; a byte without a token becomes unk (fused if fuse_unk) or, without an
  // unk token, is dropped, as HF's BPE does.
  s.ids.clear();
  bool last_unk = false;
  for (char c : piece) {
    const int32_t id = byte_id_[static_cast<uint8_t>(c)];
    if (id >= 0) {
      s.ids.push_back(static_cast<uint32_t>(id));
      last_unk = false;
    } else if (unk_id_ >= 0) {
      if (!(fuse_unk_ && last_unk)) s.ids.push_back(static_cast<uint32_t>(unk_id_));
      last_unk = true;
    }
  }
  if (s.ids.size() < 2) return;
  if (s.ids.size() <= kScanMax)
    merge_small(s);
  else
    merge_heap(s);
}

// Lowest rank first, leftmost on ties: scan the pair ranks, merge, update the two neighbours.
void BpeModel::merge_small(BpeScratch& s) const {
  auto& ids = s.ids;
  size_t n = ids.size();
  s.ranks.resize(n);
  s.made.resize(n);
  uint32_t* rank = s.ranks.data();
  uint32_t* made = s.made.data();
  auto pair_at = [&](size_t i) {
    const auto m = merges_.find(ids[i], ids[i + 1]);
    rank[i] = m.rank;
    made[i] = m.id;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_at(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == PairTable::kNoRank) break;
    ids[best] = made[best];
    std::copy(ids.begin() + best + 2, ids.begin() + n, ids.begin() + best + 1);
    std::copy(rank + best + 1, rank + n - 1, rank + best);
    std::copy(made + best + 1, made + n - 1, made + best);
    --n;
    if (best + 1 < n) pair_at(best);
    if (best > 0) pair_at(best - 1);
  }
  ids.resize(n);
}

// The same order through a min-heap of (rank, position) over a linked list of symbols; stale
// entries (a symbol merged away, or a pair that changed) are skipped when popped.
void BpeModel::merge_heap(BpeScratch& s) const {
  constexpr uint32_t kDead = 0xFFFFFFFFu;
  auto& ids = s.ids;
  const size_t n = ids.size();
  s.prev.resize(n);
  s.next.resize(n);
  for (size_t i = 0; i < n; ++i) {
    s.prev[i] = static_cast<int32_t>(i) - 1;
    s.next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  auto later = [](const BpeScratch::HeapEntry& x, const BpeScratch::HeapEntry& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  auto& heap = s.heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    if (pos < 0 || s.next[pos] < 0) return;
    const auto m = merges_.find(ids[pos], ids[s.next[pos]]);
    if (m.rank == PairTable::kNoRank) return;
    heap.push_back({m.rank, static_cast<uint32_t>(pos), m.id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const auto e = heap.back();
    heap.pop_back();
    const int32_t pos = static_cast<int32_t>(e.pos), nx = s.next[pos];
    if (ids[pos] == kDead || nx < 0) continue;
    const auto m = merges_.find(ids[pos], ids[nx]);
    if (m.rank != e.rank || m.id != e.id) continue;
    ids[pos] = e.id;
    ids[nx] = kDead;
    s.next[pos] = s.next[nx];
    if (s.next[pos] >= 0) s.prev[s.next[pos]] = pos;
    push(s.prev[pos]);
    push(pos);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (ids[i] != kDead) ids[k++] = ids[i];
  ids.resize(k);
}

}  // namespace vescale::tokenizer
