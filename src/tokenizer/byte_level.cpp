#include "tokenizer/byte_level.h"

#include <array>

namespace vescale::tokenizer {

namespace {

struct Alphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // every character of the alphabet is below U+0144
  Alphabet() {
    to_byte.fill(-1);
    // Printable Latin-1 stands for itself; the other 68 bytes take U+0100 onwards in order.
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {  // the alphabet stays below U+0800
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

uint32_t byte_to_char(uint8_t b) { return alphabet().to_char[b]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const auto& a = alphabet();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<uint8_t>(token[i]);
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (static_cast<uint8_t>(token[i + 1]) & 0xC0) == 0x80) {
      cp = (uint32_t(c & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // three- and four-byte characters are never in the alphabet
    }
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return std::nullopt;
    out += static_cast<char>(a.to_byte[cp]);
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (char c : bytes) append_utf8(out, byte_to_char(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace vescale::tokenizer
