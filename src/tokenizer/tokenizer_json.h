// Reading Hugging Face's tokenizer.json into what the encoder needs, with errors that name the
// field and say what is supported.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"

namespace vescale::tokenizer {

struct AddedTokenSpec {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // HF matches these after the non-normalized ones
};

// The normalizer, run on each text segment between the non-normalized added tokens.
enum class Normalizer { kNone, kNfc };

struct TokenizerSpec {
  BpeModelSpec model;
  Normalizer normalizer = Normalizer::kNone;
  SplitPattern pattern = SplitPattern::kNone;
  bool add_prefix_space = false;  // ByteLevel's: a space before each text segment
  std::vector<AddedTokenSpec> added_tokens;
  // add_special_tokens: the post_processor's TemplateProcessing "single" around the text.
  std::vector<int64_t> prefix_ids, suffix_ids;
};

// Throws vescale::Error naming `source` and the field.
TokenizerSpec parse_tokenizer_json(const std::string& text, const std::string& source);

}  // namespace vescale::tokenizer
