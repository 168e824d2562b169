// Each matcher tries the regex's alternatives in order at `pos`, as Oniguruma does, and returns
// the end of the first that matches. Every character is \s, \p{L}, \p{N} or "other", so one of
// the alternatives always matches: the pieces tile the text.
#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/unicode.h"

namespace vescale::tokenizer {

using unicode::char_at;
using unicode::CharClass;
using unicode::kLetter;
using unicode::kNumber;
using unicode::kOther;
using unicode::kSpace;

std::optional<SplitPattern> pattern_of_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return std::nullopt;
}

namespace {

// The end of the run of characters of class `cls` from p.
inline size_t run_end(const uint8_t* t, size_t n, size_t p, CharClass cls) {
  while (p < n) {
    if (t[p] < 0x80) {  // ASCII inline
      if (unicode::detail::ascii_class(t[p]) != cls) break;
      ++p;
      continue;
    }
    const auto c = char_at(t + p, t + n);
    if (c.cls != cls) break;
    p += c.len;
  }
  return p;
}

inline CharClass class_at(const uint8_t* t, size_t n, size_t p) {
  return p < n ? char_at(t + p, t + n).cls : kSpace;  // past the end: never continues a match
}

// `\s+(?!\S)` then `\s+` at a whitespace character; with `newlines`, `\s*[\r\n]+` first (LLaMA-3).
inline size_t whitespace_piece(const uint8_t* t, size_t n, size_t p, bool newlines) {
  size_t last_start = p, q = p, after_newline = 0;
  while (q < n) {
    const auto c = char_at(t + q, t + n);
    if (c.cls != kSpace) break;
    if (t[q] == '\r' || t[q] == '\n') after_newline = q + 1;
    last_start = q;
    q += c.len;
  }
  if (newlines && after_newline) return after_newline;  // \s* backs off to the last newline
  if (q == n) return q;                                 // (?!\S) holds at the end
  if (last_start > p) return last_start;                // give back one char for (?!\S)
  return q;                                             // \s+: a single char before \S
}

// 's 't 're 've 'm 'll 'd at t[p] == '\''; case-insensitive for LLaMA-3 (Unicode folding: 'ſ'
// U+017F folds to 's'). Returns the end, or 0.
inline size_t contraction(const uint8_t* t, size_t n, size_t p, bool fold) {
  if (p + 1 >= n) return 0;
  auto is = [&](size_t i, char lower) {
    if (i >= n) return false;
    return t[i] == lower || (fold && t[i] == lower - 'a' + 'A');
  };
  if (is(p + 1, 's') || is(p + 1, 't') || is(p + 1, 'm') || is(p + 1, 'd')) return p + 2;
  if (fold && t[p + 1] == 0xC5 && p + 2 < n && t[p + 2] == 0xBF) return p + 3;  // 'ſ
  if ((is(p + 1, 'r') || is(p + 1, 'v')) && is(p + 2, 'e')) return p + 3;
  if (is(p + 1, 'l') && is(p + 2, 'l')) return p + 3;
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t next_gpt2(const uint8_t* t, size_t n, size_t p) {
  if (t[p] == '\'') {
    if (size_t e = contraction(t, n, p, false)) return e;
  }
  auto c = char_at(t + p, t + n);
  size_t q = p;
  if (t[p] == ' ' && p + 1 < n) {  // " ?" before a letter, number or other
    const auto next = char_at(t + p + 1, t + n);
    if (next.cls != kSpace) {
      c = next;
      q = p + 1;
    }
  }
  if (c.cls != kSpace) return run_end(t, n, q + c.len, c.cls);
  return whitespace_piece(t, n, p, false);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
// and Qwen2's, the same with \p{N} for \p{N}{1,3}: digits at most `max_digits` to a piece.
size_t next_llama3(const uint8_t* t, size_t n, size_t p, int max_digits) {
  if (t[p] == '\'') {
    if (size_t e = contraction(t, n, p, true)) return e;
  }
  const auto c = char_at(t + p, t + n);
  if (c.cls == kLetter) return run_end(t, n, p + c.len, kLetter);
  if (c.cls != kNumber && t[p] != '\r' && t[p] != '\n' && class_at(t, n, p + c.len) == kLetter)
    return run_end(t, n, p + c.len, kLetter);  // one non-letter, non-number prefix
  if (c.cls == kNumber) {
    size_t q = p + c.len;
    for (int k = 1; k < max_digits && q < n; ++k) {
      const auto d = char_at(t + q, t + n);
      if (d.cls != kNumber) break;
      q += d.len;
    }
    return q;
  }
  size_t q = p;
  if (t[p] == ' ' && class_at(t, n, p + 1) == kOther) q = p + 1;
  if (q > p || c.cls == kOther) {
    q = run_end(t, n, q, kOther);
    while (q < n && (t[q] == '\r' || t[q] == '\n')) ++q;
    return q;
  }
  return whitespace_piece(t, n, p, true);
}

inline bool ascii_non_space(uint8_t c) {
  return c < 0x80 && unicode::detail::ascii_class(c) != kSpace;
}
inline bool ascii_letter(uint8_t c) {
  return c < 0x80 && unicode::detail::ascii_class(c) == kLetter;
}

}  // namespace

size_t next_piece(SplitPattern pattern, const uint8_t* text, size_t n, size_t pos) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return next_gpt2(text, n, pos);
    case SplitPattern::kLlama3:
      return next_llama3(text, n, pos, 3);
    case SplitPattern::kQwen2:
      return next_llama3(text, n, pos, 1);
    case SplitPattern::kNone:
      break;
  }
  return n;
}

// Two kinds of cut, each a boundary of the whole text's pieces whose left piece needs nothing
// past the cut to be matched:
//  - after a newline that follows a non-space and precedes a non-space ("x\n|y"): the "\n" ends
//    a piece in every pattern (for LLaMA-3 and Qwen2 the non-space before it is not needed:
//    their pieces end after a newline run);
//  - between a letter and a space before a letter ("x| y"): the letter run ends at the space.
bool is_safe_cut(SplitPattern pattern, const uint8_t* t, size_t n, size_t b) {
  if (pattern == SplitPattern::kNone || b < 2 || b + 2 > n) return false;
  if (t[b - 1] == '\n' && ascii_non_space(t[b]) &&
      (pattern != SplitPattern::kGpt2 || ascii_non_space(t[b - 2])))
    return true;
  return ascii_letter(t[b - 1]) && t[b] == ' ' && ascii_letter(t[b + 1]);
}

}  // namespace vescale::tokenizer
