// Unicode Normalization Form C (UAX #15), the normalizer of Qwen2's tokenizer.json, with the
// Unicode 9.0 data HF tokenizers normalizes with (nfc_tables.cpp, scripts/gen-nfc-tables).
// Bytes that are not well-formed UTF-8 pass through as they are (HF cannot take them at all).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vescale::tokenizer::nfc {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, count;  // kDecompositionChars[first, first + count)
};
struct Composition {
  uint32_t first, second, composite;
};
struct CodeRange {
  uint32_t first, last;
};
// Each sorted; code points not listed have combining class 0, decompose to themselves, compose
// with nothing, and are boundaries.
extern const CombiningClass kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const uint32_t kDecompositionChars[];
extern const Composition kCompositions[];  // by (first, second)
extern const size_t kCompositionCount;
extern const CodeRange kNotBoundary[];
extern const size_t kNotBoundaryCount;
extern const char kUnicodeVersion[];

uint8_t combining_class(uint32_t cp);
// A boundary: combining class 0 and NFC_Quick_Check Yes, so nothing before it interacts with it
// or what follows: NFC(a + b) == NFC(a) + NFC(b) when b starts with one.
bool is_boundary(uint32_t cp);

// NFC(text) into `out` and true; or false, with `out` untouched, when a quick check finds text
// in NFC already (the common case, found without copying; NFC text with marks that compose with
// nothing takes the long way and comes back equal).
bool normalize(std::string_view text, std::string& out);

}  // namespace vescale::tokenizer::nfc
