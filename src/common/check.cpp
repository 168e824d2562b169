#include "vescale/common/check.h"

namespace vescale::detail {

void throw_error(const char* file, int line, const std::string& msg) {
  // The message leads; the source location is for us, so it trails.
  throw Error(msg + "  [" + file + ":" + std::to_string(line) + "]");
}

}  // namespace vescale::detail
