// JSON nesting depth checked before parsing, without recursion: nlohmann's serializer (used to
// quote bad values in errors) recurses once per level, so every loader bounds the depth first.
#pragma once

#include <cstddef>
#include <string_view>

namespace kvscope {

inline constexpr int kMaxJsonDepth = 64;  // arrays and objects nested deeper are an error

// True when no array/object in `text` (brackets inside strings ignored) nests deeper than
// `limit`; otherwise false, with the offset of the first too-deep bracket in *at.
bool json_nesting_within(std::string_view text, int limit, std::size_t* at);

}  // namespace kvscope
