#pragma once
// Three kinds of failure, as in the house style:
//  - gradbox::InputError: bad input the user can fix (a flag, a file, a config). The message
//    names the flag or file and the reason; main() prints it and exits non-zero.
//  - gradbox::SystemFault: the machine let the run down (a full disk, a helper process gone).
//    Not a bug and not bad input; the message names the path or process, main() prints it as
//    an error, and nothing retries it in place.
//  - GB_CHECK: a broken invariant inside gradbox (a bug). Throws std::logic_error with
//    file:line and the values involved.
// Expected runtime events (a peer gone, a partial file) are values, not exceptions.
#include <charconv>
#include <concepts>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace gradbox {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SystemFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A write refused for want of space (ENOSPC, or EDQUOT: over quota). Carries the path it could
// not write, so that a caller can tell its own disk from the shared folder's (common/disk_space.h).
class DiskFullError : public SystemFault {
 public:
  DiskFullError(std::string path, const std::string& message) : SystemFault(message), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

namespace detail {
// Text and integers are appended directly: the protocol builds file names with str() in its
// polling loops, where a std::ostringstream per call (locale, facets) cost more than the rest.
// Everything else (floating point, enums, user types) goes through operator<<, unchanged.
template <class T>
concept AppendsDirectly = std::convertible_to<const T&, std::string_view> ||
                          std::same_as<T, char> ||
                          (std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, signed char> &&
                           !std::same_as<T, unsigned char> && !std::same_as<T, char8_t>);

template <class T>
void append(std::string& out, const T& value) {
  if constexpr (std::convertible_to<const T&, std::string_view>) {
    out += std::string_view(value);
  } else if constexpr (std::same_as<T, char>) {
    out += value;
  } else {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    out.append(digits, end);
  }
}
}  // namespace detail

// Concatenates its arguments as operator<< would (like c10::str, usable without LibTorch).
template <class... Args>
std::string str(const Args&... args) {
  if constexpr ((detail::AppendsDirectly<Args> && ...)) {
    std::string out;
    (detail::append(out, args), ...);
    return out;
  } else {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
  }
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
