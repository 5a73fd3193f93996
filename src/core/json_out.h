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

// Appends `,"name":` (or `"name":` when first).
inline void key(std::string& out, std::string_view name, bool first = false) {
  if (!first) out += ',';
  out += '"';
  out += name;
  out += "\":";
}

}  // namespace tokenscope::jsonout
