#pragma once
// std::bit_cast where the standard library has it (GCC 11 on); the same bits through memcpy
// where it does not (GCC 10, Debian 11's compiler). Header-only.
#include <bit>
#include <cstring>
#include <type_traits>

namespace gradbox {

#if defined(__cpp_lib_bit_cast)
using std::bit_cast;
#else
template <class To, class From>
To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>);
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
#endif

}  // namespace gradbox
