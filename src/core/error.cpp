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

// The code point of a 2- or 3-byte UTF-8 sequence that changes how the text
// around it is shown rather than showing itself: the bidirectional formatting
// characters (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069: a
// right-to-left override makes "exe.txt" of "txt.exe") and the line and
// paragraph separators (U+2028, U+2029: a line break in some terminals); 0
// for any other.
unsigned invisible_format_char(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (n == 2 && b(0) == 0xd8 && b(1) == 0x9c) return 0x061c;
  if (n != 3 || b(0) != 0xe2) return 0;
  const unsigned cp = ((b(0) & 0x0fu) << 12) | ((b(1) & 0x3fu) << 6) | (b(2) & 0x3fu);
  if (cp == 0x200e || cp == 0x200f || (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
    return cp;
  return 0;
}

// Appends the escaped form of at most max_bytes of input; returns whether
// all of it was shown.
bool append_escaped(std::string& out, std::string_view s, std::size_t max_bytes, bool keep_newlines = false) {
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
      if (const unsigned cp = invisible_format_char(s, i, n); cp != 0)
        out += fmt::format("\\u{{{:04x}}}", cp);
      else
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
        out += keep_newlines ? "\n" : "\\n";
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
  // The file name is outside text too (a run directory named with a newline
  // would forge a line of the message).
  std::string where;
  append_escaped(where, file, std::string_view::npos);
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

std::string display_text(std::string_view input) {
  std::string out;
  out.reserve(input.size());
  append_escaped(out, input, std::string_view::npos);
  return out;
}

std::string display_lines(std::string_view input) {
  std::string out;
  out.reserve(input.size());
  append_escaped(out, input, std::string_view::npos, /*keep_newlines=*/true);
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string markdown_text(std::string_view input) {
  const std::string shown = html_escape(display_text(input));
  std::string out;
  out.reserve(shown.size() + 8);
  for (const char c : shown) {
    switch (c) {
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '|':
      case '~':
        out += '\\';
        out += c;
        break;
      default:
        out += c;
    }
  }
  return out;
}

InputError::InputError(std::string file, std::size_t line, std::string field, const std::string& problem)
    : UsageError(format_input_error(file, line, field, problem)),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)),
      problem_(problem) {}

}  // namespace tokenscope
