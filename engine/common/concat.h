// Strings joined by appending: concat({"block ", std::to_string(b), " of ", name}). GCC 12's
// -Wrestrict misfires on long "literal" + std::string chains (a false overlap in the inlined
// copies), which -Werror turns into a build failure; appending into one string sidesteps it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace kvscope {

inline std::string concat(std::initializer_list<std::string_view> parts) {
  std::size_t n = 0;
  for (std::string_view p : parts) n += p.size();
  std::string s;
  s.reserve(n);
  for (std::string_view p : parts) s.append(p);
  return s;
}

}  // namespace kvscope
