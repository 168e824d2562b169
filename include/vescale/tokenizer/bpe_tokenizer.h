// A byte-level BPE tokenizer that reads Hugging Face's tokenizer.json (GPT-2, LLaMA-3 and Qwen2
// style) and gives the ids HF `tokenizers` gives (docs/tokenizer.md).
//
//   auto tok = vescale::tokenizer::BpeTokenizer::from_file("data/tokenizer_bpe2048.json");
//   std::vector<int64_t> ids = tok.encode("In the beginning");
//   std::string text = tok.decode(ids);  // == "In the beginning"
//
// Supported: the GPT-2 pre-tokenizer (ByteLevel with its regex, add_prefix_space either way),
// LLaMA-3's and Qwen2's (Split on its regex, then ByteLevel without regex), the NFC normalizer
// (Qwen2's), the byte-level alphabet, merges in both forms, ignore_merges, added tokens (special
// or not), TemplateProcessing for add_special_tokens (e.g. LLaMA-3's <|begin_of_text|>), the
// ByteLevel decoder. Anything else in the file is an error that names the field.
//
// Any bytes encode, also invalid UTF-8: a byte that does not start a well-formed UTF-8
// sequence is a character of its own that is neither letter, number nor space (HF cannot take
// such input at all), so decode(encode(x)) == x for every x when every byte has a token (NFC(x)
// under the NFC normalizer).
//
// Immutable once built: copies share the tables, and const calls may run on many threads at
// once (each thread keeps its own cache of pieces already encoded).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vescale::tokenizer {

class BpeTokenizer {
 public:
  // Throws vescale::Error naming the file and the field for anything unsupported or malformed.
  static BpeTokenizer from_file(const std::string& path);
  // `source` names the text in errors (a path, or "<test>").
  static BpeTokenizer from_json(const std::string& text, const std::string& source);

  // add_special_tokens: the post_processor's template around the text (LLaMA-3: bos first).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Throws on an id no token has. skip_special_tokens drops special added tokens.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  int64_t vocab_size() const;  // the largest id + 1, added tokens included
  // The id of a token as tokenizer.json spells it (byte-level alphabet: "Ġthe"), added ones too.
  std::optional<int64_t> token_to_id(std::string_view token) const;

  // Streaming. A text too large to hold is read in buffers, each cut at safe_cut(); chunk i is
  // encoded with encode_chunk(chunk, i == 0), and the ids of all chunks, in order, are
  // encode(text) (without special tokens). safe_cut gives the last offset b of `text` where
  // the cut cannot change the ids whatever follows, or 0 when the buffer has none (read more).
  size_t safe_cut(std::string_view text) const;
  // As encode(chunk), except that a chunk after the first takes no ByteLevel prefix space.
  void encode_chunk(std::string_view chunk, bool first, std::vector<int64_t>& out) const;

 private:
  struct Impl;
  explicit BpeTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace vescale::tokenizer
