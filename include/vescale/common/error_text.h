// What a user is shown of an exception: libtorch's errors (c10::Error) without the C++ stack they
// carry, which names no file or field of ours.
#pragma once
#include <exception>
#include <string>

namespace vescale {

// e.what(), for a c10::Error without its stack and trailing blank space; `with_stack` keeps it
// (--log-level debug).
std::string error_text(const std::exception& e, bool with_stack = false);

}  // namespace vescale
