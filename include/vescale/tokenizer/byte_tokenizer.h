// The built-in tokenizer: one token per byte (vocab 256), so the default run needs nothing
// from outside. Real runs bring pre-tokenized .bin files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vescale::tokenizer {

struct ByteTokenizer {
  static constexpr int64_t kVocabSize = 256;
  static std::vector<int64_t> encode(const std::string& text);
  static std::string decode(
      const std::vector<int64_t>& tokens);  // throws on a token outside [0, 256)
};

}  // namespace vescale::tokenizer
