// Added tokens (tokenizer.json's added_tokens): found in the text before anything else, as HF's
// AddedVocabulary does: leftmost match first, the longest one at that position.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vescale::tokenizer {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t pos = std::string_view::npos, len = 0;
    int32_t id = -1;
  };
  void add(std::string_view content, int32_t id);
  bool empty() const { return tokens_.empty(); }
  // The leftmost-longest token in text[from, ...); pos == npos when there is none.
  Match find(std::string_view text, size_t from) const;
  // Whether a token occurs in text over or up to position b (starts before b, ends at or after b).
  bool touches(std::string_view text, size_t b) const;
  size_t max_length() const { return max_len_; }

 private:
  struct Node {
    int32_t id = -1;                                 // a token ends here
    std::vector<std::pair<uint8_t, int32_t>> child;  // byte -> node
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{Node{}};
  std::vector<std::string> tokens_;
  bool first_[256] = {};
  size_t max_len_ = 0;
};

}  // namespace vescale::tokenizer
