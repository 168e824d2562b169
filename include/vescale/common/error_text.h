// What a user is shown of an exception: libtorch's errors (c10::Error) without the C++ stack they
// carry, and ours without their source locations: neither names a file or field of the user's.
#pragma once
#include <exception>
#include <string>

namespace vescale {

// e.what() as a user sees it: a c10::Error without its C++ stack, and without the source
// locations ("  [src/x.cpp:12]") our errors carry; `with_stack` keeps both (--log-level debug).
std::string error_text(const std::exception& e, bool with_stack = false);

}  // namespace vescale
