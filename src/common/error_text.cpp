#include "vescale/common/error_text.h"

#include <c10/util/Exception.h>

#include <cctype>

namespace vescale {

namespace {

// Drops every "  [path/file.cpp:123]" that VESCALE_CHECK appends (wrapped errors carry several).
std::string without_locations(std::string m) {
  for (size_t at = m.find("  ["); at != std::string::npos; at = m.find("  [", at)) {
    const size_t close = m.find(']', at);
    const size_t colon = close == std::string::npos ? close : m.rfind(':', close);
    bool location = colon != std::string::npos && colon > at + 3 && colon + 1 < close;
    for (size_t i = at + 3; location && i < close; ++i)
      location = !std::isspace(static_cast<unsigned char>(m[i])) &&
                 (i <= colon || std::isdigit(static_cast<unsigned char>(m[i])));
    if (location)
      m.erase(at, close + 1 - at);
    else
      at += 3;
  }
  return m;
}

}  // namespace

std::string error_text(const std::exception& e, bool with_stack) {
  if (with_stack) return e.what();
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string m = c ? c->what_without_backtrace() : e.what();
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return without_locations(std::move(m));
}

}  // namespace vescale
