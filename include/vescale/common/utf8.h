// UTF-8 checks for text that leaves the process in formats that demand it (JSON traces,
// TensorBoard text, logs) while the bytes may be anything (a byte-level model's samples).
#pragma once
#include <cstddef>
#include <string>

namespace vescale {

// The length of the well-formed UTF-8 sequence at p[0..n) (1-4; no overlongs, no surrogates,
// nothing above U+10FFFF), or 0 when p does not start one.
size_t utf8_sequence_length(const unsigned char* p, size_t n);

// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

}  // namespace vescale
