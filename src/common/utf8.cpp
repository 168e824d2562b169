#include "vescale/common/utf8.h"

namespace vescale {

size_t utf8_sequence_length(const unsigned char* p, size_t n) {
  if (n == 0) return 0;
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  const size_t len = c >= 0xf0 && c <= 0xf4  ? 4
                     : c >= 0xe0 && c < 0xf0 ? 3
                     : c >= 0xc2 && c < 0xe0 ? 2
                                             : 0;
  if (len == 0 || len > n) return 0;
  for (size_t k = 1; k < len; ++k)
    if ((p[k] & 0xc0) != 0x80) return 0;
  if (len == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) return 0;
  if (len == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))) return 0;
  return len;
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence_length(p + i, s.size() - i);
    if (len > 0) {
      out.append(s, i, len), i += len;
    } else {
      out += "\xef\xbf\xbd", ++i;
    }
  }
  return out;
}

}  // namespace vescale
