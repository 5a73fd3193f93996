#include "core/json_depth.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace tokenscope {

std::size_t json_too_deep_at(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false;
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped byte, whatever it is
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) return i;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return std::string_view::npos;
}

void require_json_depth(std::string_view text, const std::string& file, std::size_t first_line,
                        std::size_t max_depth) {
  const std::size_t at = json_too_deep_at(text, max_depth);
  if (at == std::string_view::npos) return;
  const std::size_t line = first_line + static_cast<std::size_t>(std::count(
                                            text.begin(), text.begin() + static_cast<long>(at), '\n'));
  throw InputError(file, line, "",
                   fmt::format("JSON nested deeper than {} levels (byte {} of the document opens level {}): "
                               "refused before parsing; no input tokenscope reads is nested that deep",
                               max_depth, at, max_depth + 1));
}

}  // namespace tokenscope
