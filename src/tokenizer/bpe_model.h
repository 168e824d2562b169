// The BPE model: the vocabulary (kept as raw bytes), the merges by rank, and the merge loop
// that turns one pre-token into ids, with a per-thread cache of pieces already seen.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/flat_tables.h"

namespace vescale::tokenizer {

// tokenizer.json's "model" section, as read (strings in the byte-level alphabet).
struct BpeModelSpec {
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

// Scratch one thread reuses across calls: no allocation per piece once warm.
struct BpeScratch {
  struct Span {
    uint32_t off = 0, len = 0;
  };
  BytesTable<Span> cache;  // piece (raw bytes) -> ids in cache_ids
  std::vector<int32_t> cache_ids;
  std::vector<uint32_t> ids, ranks, made;  // the merge loop's symbols
  std::vector<int32_t> prev, next;
  struct HeapEntry {
    uint32_t rank, pos, id;
  };
  std::vector<HeapEntry> heap;
};

class BpeModel {
 public:
  // Throws naming the field (model.merges[i], model.unk_token) and `source`.
  BpeModel(const BpeModelSpec& spec, const std::string& source);

  // Appends the ids of one pre-token (raw bytes). With ignore_merges a piece that is itself a
  // token is that token; else each byte's token, merged lowest rank first (leftmost on ties).
  void encode_piece(std::string_view piece, std::vector<int64_t>& out, BpeScratch& s) const;

  // The id of a token given as raw bytes.
  std::optional<int64_t> find(std::string_view raw) const {
    const int32_t* id = vocab_.find(raw);
    return id ? std::optional<int64_t>(*id) : std::nullopt;
  }

 private:
  void merge(std::string_view piece, BpeScratch& s) const;  // leaves the ids in s.ids
  void merge_small(BpeScratch& s) const;
  void merge_heap(BpeScratch& s) const;

  BytesTable<int32_t> vocab_;  // raw bytes -> id, for tokens of the byte-level alphabet
  int32_t byte_id_[256];       // each byte's own token, or -1
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, ignore_merges_ = false;
  PairTable merges_;
};

}  // namespace vescale::tokenizer
