#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace vescale::tokenizer::unicode {

namespace {

// The BMP's classes, one byte each (64 KiB), filled once from the ranges.
const std::array<CharClass, 0x10000>& bmp_table() {
  static const auto table = [] {
    std::array<CharClass, 0x10000> t{};
    for (size_t i = 0; i < kCharRangeCount && kCharRanges[i].first < 0x10000; ++i)
      for (uint32_t cp = kCharRanges[i].first; cp <= kCharRanges[i].last && cp < 0x10000; ++cp)
        t[cp] = kCharRanges[i].cls;
    return t;
  }();
  return table;
}

}  // namespace

CharClass class_of(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  const CharRange* end = kCharRanges + kCharRangeCount;
  const CharRange* r = std::upper_bound(kCharRanges, end, cp,
                                        [](uint32_t v, const CharRange& x) { return v < x.first; });
  if (r == kCharRanges) return kOther;
  --r;
  return cp <= r->last ? r->cls : kOther;
}

}  // namespace vescale::tokenizer::unicode
