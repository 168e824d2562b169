// Open-addressing hash tables for the encoder's hot lookups: byte strings -> ids (the
// vocabulary, the piece cache) and id pairs -> merges. Flat arrays, no node per entry.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace vescale::tokenizer {

inline uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t hash_bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  return mix64(h ^ w);
}

// Byte string -> value. Keys live in one arena; lookups compare the stored hash first.
template <typename Value>
class BytesTable {
 public:
  const Value* find(std::string_view key, uint64_t hash) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.hash == hash && s.len == key.size() &&
          std::memcmp(keys_.data() + s.off, key.data(), key.size()) == 0)
        return &s.value;
    }
  }
  const Value* find(std::string_view key) const { return find(key, hash_bytes(key)); }

  // Inserts or overwrites.
  void insert(std::string_view key, uint64_t hash, const Value& value) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.used) {
        s = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), true,
                 value};
        keys_.append(key);
        ++used_;
        return;
      }
      if (s.hash == hash && s.len == key.size() &&
          std::memcmp(keys_.data() + s.off, key.data(), key.size()) == 0) {
        s.value = value;
        return;
      }
    }
  }
  void insert(std::string_view key, const Value& value) { insert(key, hash_bytes(key), value); }

  size_t size() const { return used_; }
  size_t key_bytes() const { return keys_.size(); }
  void clear() {
    slots_.clear();
    keys_.clear();
    used_ = 0;
    mask_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t off = 0, len = 0;
    bool used = false;
    Value value{};
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (!s.used) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::string keys_;
  size_t used_ = 0, mask_ = 0;
};

// (left id, right id) -> the merge: its rank (lower merges first) and the id it makes.
class PairTable {
 public:
  struct Merge {
    uint32_t rank, id;
  };
  static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

  Merge find(uint32_t a, uint32_t b) const {
    const uint64_t key = (uint64_t(a) << 32) | b;
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return {kNoRank, 0};
    }
  }
  // Inserts or overwrites (a later duplicate of a pair wins, as in HF's map of merges).
  void insert(uint32_t a, uint32_t b, Merge m) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    const uint64_t key = (uint64_t(a) << 32) | b;
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == key) {
        s.merge = m;
        return;
      }
      if (s.key == kEmpty) {
        s = Slot{key, m};
        ++used_;
        return;
      }
    }
  }
  size_t size() const { return used_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;  // ids are below 2^31
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{kNoRank, 0};
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix64(s.key) & mask_;
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_ = std::vector<Slot>(64);
  size_t used_ = 0, mask_ = 63;
};

}  // namespace vescale::tokenizer
