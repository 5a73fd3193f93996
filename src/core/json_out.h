// Fast, deterministic appenders for JSON lines written on hot paths
// (requests.jsonl, steps.jsonl): std::to_chars, no locale, no allocation
// beyond the output string.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokenscope::jsonout {

inline void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

inline void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Fixed notation with the given number of decimals.
inline void append_fixed(std::string& out, double v, int decimals) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  out.append(buf, r.ptr);
}

// Appends s as a JSON string literal (quotes included). Control characters
// and quotes are escaped; bytes >= 0x80 pass through (the caller supplies
// UTF-8; invalid sequences are the caller's to avoid).
inline void append_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s, start, i - start);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    start = i + 1;
  }
  out.append(s, start, s.size() - start);
  out += '"';
}

// Appends `,"name":` (or `"name":` when first).
inline void key(std::string& out, std::string_view name, bool first = false) {
  if (!first) out += ',';
  out += '"';
  out += name;
  out += "\":";
}

}  // namespace tokenscope::jsonout
