#include "vescale/tokenizer/text_tokenizer.h"

#include "vescale/tokenizer/bpe_tokenizer.h"
#include "vescale/tokenizer/byte_tokenizer.h"

namespace vescale::tokenizer {

TextTokenizer::TextTokenizer(const std::string& tokenizer_json) {
  if (tokenizer_json.empty()) return;
  bpe_ = std::make_shared<const BpeTokenizer>(BpeTokenizer::from_file(tokenizer_json));
  name_ = tokenizer_json;
}

std::vector<int64_t> TextTokenizer::encode(const std::string& text) const {
  return bpe_ ? bpe_->encode(text, /*add_special_tokens=*/true) : ByteTokenizer::encode(text);
}

std::string TextTokenizer::decode(const std::vector<int64_t>& ids) const {
  return bpe_ ? bpe_->decode(ids, /*skip_special_tokens=*/true) : ByteTokenizer::decode(ids);
}

int64_t TextTokenizer::vocab_size() const {
  return bpe_ ? bpe_->vocab_size() : ByteTokenizer::kVocabSize;
}

std::vector<int64_t> TextTokenizer::stop_ids() const {
  std::vector<int64_t> ids;
  if (!bpe_) return ids;
  for (const char* t : {"<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "</s>"})
    if (auto id = bpe_->token_to_id(t)) ids.push_back(*id);
  return ids;
}

}  // namespace vescale::tokenizer
