// NFC in segments: the text splits before each boundary character (nfc.h) and each segment
// normalizes on its own. Text before the first character that is no boundary stays as it is; a
// segment of one boundary character is copied; any other is decomposed (full canonical
// decompositions, Hangul by arithmetic), its marks put in canonical order (a stable sort by
// combining class) and composed again (UAX #15: each character with the last starter unless a
// character between them blocks it).
#include "tokenizer/nfc.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode.h"

namespace vescale::tokenizer::nfc {

namespace {

// Hangul syllables: L V (T), by arithmetic (Unicode's chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

constexpr uint32_t kFirstNonTrivial =
    0x300;  // below it: class 0, boundaries (the generator checks)

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp - kSBase < kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* d = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& x, uint32_t v) { return x.cp < v; });
  if (d == end || d->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionChars + d->first, kDecompositionChars + d->first + d->count);
}

// The primary composite of a then b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a - kLBase < kLCount && b - kVBase < kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a - kSBase < kSCount && (a - kSBase) % kTCount == 0 && b - kTBase - 1 < kTCount - 1)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* c = std::lower_bound(
      kCompositions, end, std::make_pair(a, b),
      [](const Composition& x, auto v) { return std::make_pair(x.first, x.second) < v; });
  return c != end && c->first == a && c->second == b ? c->composite : 0;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// NFC of one segment's code points (`seg`, consumed), appended to `out`.
void normalize_segment(std::vector<uint32_t>& seg, std::vector<uint32_t>& d, std::string& out) {
  d.clear();
  for (uint32_t cp : seg) decompose(cp, d);
  for (size_t i = 0; i < d.size();) {  // canonical order: each run of non-starters by class
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](uint32_t x, uint32_t y) {
      return combining_class(x) < combining_class(y);
    });
    i = j;
  }
  // Composition: a character joins the last starter when nothing between them has class 0 or
  // a class at least its own (last_cc: the class of the last character kept since the starter).
  seg.clear();
  size_t starter = SIZE_MAX;
  int last_cc = -1;
  for (uint32_t c : d) {
    const int cc = combining_class(c);
    if (starter != SIZE_MAX && last_cc < cc) {
      if (const uint32_t comp = compose(seg[starter], c)) {
        seg[starter] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = seg.size();
      last_cc = -1;
    } else {
      last_cc = cc;
    }
    seg.push_back(c);
  }
  for (uint32_t c : seg) append_utf8(c, out);
}

}  // namespace

uint8_t combining_class(uint32_t cp) {
  if (cp < kFirstNonTrivial) return 0;
  const CombiningClass* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClass* c = std::lower_bound(
      kCombiningClasses, end, cp, [](const CombiningClass& x, uint32_t v) { return x.cp < v; });
  return c != end && c->cp == cp ? c->ccc : 0;
}

bool is_boundary(uint32_t cp) {
  if (cp < kFirstNonTrivial) return true;
  const CodeRange* end = kNotBoundary + kNotBoundaryCount;
  const CodeRange* r = std::upper_bound(kNotBoundary, end, cp,
                                        [](uint32_t v, const CodeRange& x) { return v < x.first; });
  return r == kNotBoundary || cp > (r - 1)->last;
}

bool normalize(std::string_view text, std::string& out) {
  const auto* t = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  // Up to the last boundary before the first character that is none, the text stays.
  size_t p = 0, from = 0;
  for (;;) {
    if (p == n) return false;
    if (t[p] < 0x80) {
      from = p++;
      continue;
    }
    const auto c = unicode::decode(t + p, t + n);
    if (c.valid && !is_boundary(c.cp)) break;
    from = p;
    p += c.len;
  }
  out.assign(text.data(), from);
  thread_local std::vector<uint32_t> seg, work;
  seg.clear();
  size_t seg_start = from;
  auto flush = [&](size_t seg_end) {
    if (seg.size() == 1 && is_boundary(seg[0]))
      out.append(text.data() + seg_start, seg_end - seg_start);  // NFC already
    else if (!seg.empty())
      normalize_segment(seg, work, out);
    seg.clear();
    seg_start = seg_end;
  };
  for (p = from; p < n;) {
    const auto c = unicode::decode(t + p, t + n);
    if (!c.valid) {  // its own boundary, kept as it is
      flush(p);
      out.push_back(static_cast<char>(t[p]));
      seg_start = ++p;
      continue;
    }
    if (is_boundary(c.cp)) flush(p);
    seg.push_back(c.cp);
    p += c.len;
  }
  flush(n);
  return true;
}

}  // namespace vescale::tokenizer::nfc
