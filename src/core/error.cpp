#include "core/error.h"

#include <fmt/format.h>

namespace tokenscope {
namespace {

// Length of the valid UTF-8 sequence of a printable character starting at
// s[i], or 0 (C1 controls U+0080..U+009F count as not printable).
std::size_t printable_utf8_length(std::string_view s, std::size_t i) {
  const std::size_t n = utf8_sequence_length(s, i);
  if (n == 2 && static_cast<unsigned char>(s[i]) == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0)
    return 0;
  return n;
}

// Appends the escaped form of at most max_bytes of input; returns whether
// all of it was shown.
bool append_escaped(std::string& out, std::string_view s, std::size_t max_bytes) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      if (i + 1 > max_bytes) return false;
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (const std::size_t n = c >= 0x80 ? printable_utf8_length(s, i) : 0; n > 0) {
      if (i + n > max_bytes) return false;
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    if (i + 1 > max_bytes) return false;
    switch (c) {
      case '\0':
        out += "\\0";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += fmt::format("\\x{:02x}", c);
    }
    ++i;
  }
  return true;
}

std::string format_input_error(const std::string& file, std::size_t line, const std::string& field,
                               const std::string& problem) {
  std::string where = file;
  if (line > 0) where += fmt::format(":{}", line);
  if (field.empty()) return fmt::format("{}: {}", where, problem);
  std::string shown;
  if (!append_escaped(shown, field, 80)) shown += "…";
  return fmt::format("{}: field '{}': {}", where, shown, problem);
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  if (i >= s.size()) return 0;
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  return n;
}

std::string quote_input(std::string_view input, std::size_t max_bytes) {
  std::string out = "'";
  out.reserve(std::min(input.size(), max_bytes) + 8);
  const bool whole = append_escaped(out, input, max_bytes);
  out += '\'';
  if (!whole) out += "…";
  return out;
}

InputError::InputError(std::string file, std::size_t line, std::string field, const std::string& problem)
    : UsageError(format_input_error(file, line, field, problem)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      problem_(problem) {}

}  // namespace tokenscope
