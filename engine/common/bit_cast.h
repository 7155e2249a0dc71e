// kvscope::bit_cast: the bits of one trivially copyable value read as another type of the same
// size, as std::bit_cast. The browser build's standard library (Emscripten 3.1.6's libc++ 14)
// has no std::bit_cast; GCC and Clang both have the builtin it is made of, so every build uses
// that one (docs/web.md).
#pragma once

#include <type_traits>

namespace kvscope {

template <class To, class From>
constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: the two types differ in size");
  static_assert(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>,
                "bit_cast: both types must be trivially copyable");
  return __builtin_bit_cast(To, from);
}

}  // namespace kvscope
