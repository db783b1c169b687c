#pragma once
// Two kinds of failure, as in the house style:
//  - gradbox::InputError: bad input the user can fix (a flag, a file, a config). The message
//    names the flag or file and the reason; main() prints it and exits non-zero.
//  - GB_CHECK: a broken invariant inside gradbox (a bug). Throws std::logic_error with
//    file:line and the values involved.
// Expected runtime events (a peer gone, a partial file) are values, not exceptions.
#include <sstream>
#include <stdexcept>
#include <string>

namespace gradbox {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< (like c10::str, usable without LibTorch).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace gradbox

#define GB_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::gradbox::detail::check_failed(__FILE__, __LINE__, #cond,              \
                                                 ::gradbox::str(__VA_ARGS__));           \
  } while (0)

// Bad input: throws InputError with the message as given (it must name the file or flag).
#define GB_REQUIRE(cond, ...)                                                            \
  do {                                                                                   \
    if (!(cond)) throw ::gradbox::InputError(::gradbox::str(__VA_ARGS__));               \
  } while (0)
