// Small string helpers shared by the readers of outside input.
#pragma once

#include <string_view>

namespace tokenscope {

// ASCII whitespace: space, \t, \n, \v, \f, \r (what std::isspace means in the
// C locale, without depending on the locale).
constexpr bool is_ascii_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

// s without leading and trailing ASCII whitespace.
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace tokenscope
