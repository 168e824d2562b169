#include "vescale/common/error_text.h"

#include <c10/util/Exception.h>

namespace vescale {

std::string error_text(const std::exception& e, bool with_stack) {
  const auto* c = dynamic_cast<const c10::Error*>(&e);
  if (c == nullptr) return e.what();
  if (with_stack) return c->what();
  std::string m = c->what_without_backtrace();
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace vescale
