#include "tokenizer/added_tokens.h"

#include <cstring>

namespace vescale::tokenizer {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  for (const auto& [byte, next] : nodes_[node].child)
    if (byte == b) return next;
  return -1;
}

void AddedTokenMatcher::add(std::string_view content, int32_t id) {
  if (content.empty()) return;
  int32_t node = 0;
  for (char c : content) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].child.emplace_back(b, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  nodes_[node].id = id;
  tokens_.emplace_back(content);
  first_[static_cast<uint8_t>(content[0])] = true;
  max_len_ = std::max(max_len_, content.size());
}

AddedTokenMatcher::Match AddedTokenMatcher::find(std::string_view text, size_t from) const {
  if (tokens_.empty()) return {};
  const auto* t = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t p = from; p < text.size(); ++p) {
    if (!first_[t[p]]) continue;
    Match best;
    int32_t node = 0;
    for (size_t q = p; q < text.size(); ++q) {
      node = child(node, t[q]);
      if (node < 0) break;
      if (nodes_[node].id >= 0) best = {p, q + 1 - p, nodes_[node].id};
    }
    if (best.id >= 0) return best;
  }
  return {};
}

bool AddedTokenMatcher::touches(std::string_view text, size_t b) const {
  for (const auto& tok : tokens_) {
    const size_t lo = b >= tok.size() ? b - tok.size() : 0;
    for (size_t s = lo; s < b; ++s)
      if (s + tok.size() <= text.size() &&
          std::memcmp(text.data() + s, tok.data(), tok.size()) == 0)
        return true;
  }
  return false;
}

}  // namespace vescale::tokenizer
