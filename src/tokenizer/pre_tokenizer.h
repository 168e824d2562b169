// The pre-tokenizers: the GPT-2, LLaMA-3 and Qwen2 split regexes as hand-written matchers (no
// regex engine), giving the same pieces as Oniguruma's leftmost-first matching does in HF
// tokenizers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace vescale::tokenizer {

enum class SplitPattern {
  kNone,    // ByteLevel(use_regex: false) alone: the whole text is one piece
  kGpt2,    // ByteLevel(use_regex: true), or Split(kGpt2Regex)
  kLlama3,  // Split(kLlama3Regex)
  kQwen2,   // Split(kQwen2Regex): LLaMA-3's with single digits (Qwen2, Qwen2.5, Qwen3)
};

inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pattern a Split pre-tokenizer's regex spells, if it is one we implement.
std::optional<SplitPattern> pattern_of_regex(std::string_view regex);

// The end of the piece that starts at `pos` (< n) of text[0, n). Pieces tile the text.
size_t next_piece(SplitPattern pattern, const uint8_t* text, size_t n, size_t pos);

// A place where text may be cut without changing its pieces, whatever follows: true when the
// pieces of text[0, b) then those of text[b, ...) are the pieces of the whole text. Looks at
// text[b - 2, b + 2) only (conservative: ASCII context), so callers can test cut points of a
// buffer whose continuation they have not read.
bool is_safe_cut(SplitPattern pattern, const uint8_t* text, size_t n, size_t b);

}  // namespace vescale::tokenizer
