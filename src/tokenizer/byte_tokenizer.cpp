#include "vescale/tokenizer/byte_tokenizer.h"

#include "vescale/common/check.h"

namespace vescale::tokenizer {

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) {
  std::vector<int64_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    VESCALE_CHECK(tokens[i] >= 0 && tokens[i] < kVocabSize, "byte tokenizer: token ", tokens[i],
                  " at position ", i, " is not a byte (0..255)");
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

}  // namespace vescale::tokenizer
