// GPT-2's byte-level alphabet (bytes_to_unicode): each byte is one printable character, so a
// vocabulary of strings covers any byte string. Tokens are kept as raw bytes inside; these map
// tokenizer.json's strings to them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vescale::tokenizer {

// The code point that stands for byte b.
uint32_t byte_to_char(uint8_t b);

// A token string of the byte-level alphabet -> its raw bytes; nullopt if it holds a character
// outside the alphabet (such a token decodes as its own UTF-8, as HF's ByteLevel decoder does).
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// Raw bytes -> the token string (for messages and tests).
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace vescale::tokenizer
