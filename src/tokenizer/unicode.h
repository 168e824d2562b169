// Unicode for the pre-tokenizers: UTF-8 decoding that never fails, and the classes \p{L}, \p{N}
// and \s of Oniguruma (the regex engine of Hugging Face tokenizers), from unicode_tables.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vescale::tokenizer::unicode {

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CharRange {
  uint32_t first, last;
  CharClass cls;
};
extern const CharRange kCharRanges[];  // sorted, disjoint; code points not listed are kOther
extern const size_t kCharRangeCount;
extern const char kUnicodeVersion[];

// The class of a code point (a table for the BMP, a binary search above it).
CharClass class_of(uint32_t cp);

struct Char {
  uint32_t len;  // bytes
  CharClass cls;
};

namespace detail {
// ASCII classes, the hot path.
inline constexpr CharClass ascii_class(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? kLetter
         : c >= '0' && c <= '9'                           ? kNumber
         : c == ' ' || (c >= 0x09 && c <= 0x0D)           ? kSpace
                                                          : kOther;
}
}  // namespace detail

// The code point at p (p < end). A byte that does not start a well-formed UTF-8 sequence
// (Unicode's Table 3-7: no overlongs, surrogates or values past U+10FFFF) is a character of its
// own, one byte long and not valid: any byte string decodes, and the bytes are kept as they are.
struct CodePoint {
  uint32_t len;  // bytes
  uint32_t cp;   // the byte itself when !valid
  bool valid;
};
inline CodePoint decode(const uint8_t* p, const uint8_t* end) {
  const uint8_t c = p[0];
  if (c < 0x80) return {1, c, true};
  const size_t avail = static_cast<size_t>(end - p);
  auto cont = [&](size_t i, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i < avail && p[i] >= lo && p[i] <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) {
    if (cont(1)) return {2, (uint32_t(c & 0x1F) << 6) | (p[1] & 0x3F), true};
  } else if (c >= 0xE0 && c <= 0xEF) {
    const uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (cont(1, lo, hi) && cont(2))
      return {3, (uint32_t(c & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F), true};
  } else if (c >= 0xF0 && c <= 0xF4) {
    const uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (cont(1, lo, hi) && cont(2) && cont(3))
      return {4,
              (uint32_t(c & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
                  (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F),
              true};
  }
  return {1, c, false};
}

// The character at p (p < end) and its class; an invalid byte (see decode) is kOther.
inline Char char_at(const uint8_t* p, const uint8_t* end) {
  if (p[0] < 0x80) return {1, detail::ascii_class(p[0])};
  const CodePoint d = decode(p, end);
  return {d.len, d.valid ? class_of(d.cp) : kOther};
}

}  // namespace vescale::tokenizer::unicode
