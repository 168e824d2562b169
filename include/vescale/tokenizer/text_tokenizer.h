// The tokenizer a run's text goes through: a Hugging Face tokenizer.json (data.tokenizer,
// vescale-generate --tokenizer), or bytes (vocab 256) when none is named.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace vescale::tokenizer {

class BpeTokenizer;

class TextTokenizer {
 public:
  // `tokenizer_json` empty: the byte tokenizer. Throws naming the file when it can't be read.
  explicit TextTokenizer(const std::string& tokenizer_json = "");
  // With the special tokens the tokenizer's post-processor adds (LLaMA-3's <|begin_of_text|>).
  std::vector<int64_t> encode(const std::string& text) const;
  // Special tokens left out; throws naming an id outside the vocabulary.
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const;
  // The end-of-text tokens the vocabulary has (<|endoftext|>, <|end_of_text|>, <|eot_id|>, </s>).
  std::vector<int64_t> stop_ids() const;
  const std::string& name() const { return name_; }  // "bytes" or the file

 private:
  std::shared_ptr<const BpeTokenizer> bpe_;
  std::string name_ = "bytes";
};

}  // namespace vescale::tokenizer
