// Errors: say what is wrong, where, and how to fix it. Library code throws; it never exits.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace vescale {

// Every error vescale raises. Catch this to tell our errors from libtorch's.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A collective did not finish within its timeout (a peer hung or died).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace vescale

#define VESCALE_CHECK(cond, ...)                                                               \
  do {                                                                                         \
    if (__builtin_expect(!(cond), 0))                                                          \
      ::vescale::detail::throw_error(__FILE__, __LINE__, ::vescale::detail::cat(__VA_ARGS__)); \
  } while (0)

#define VESCALE_FAIL(...) \
  ::vescale::detail::throw_error(__FILE__, __LINE__, ::vescale::detail::cat(__VA_ARGS__))
