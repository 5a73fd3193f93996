// Fast, deterministic appenders for JSON lines written on hot paths
// (requests.jsonl, steps.jsonl): std::to_chars, no locale, no allocation
// beyond the output string.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstring>
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

// Whether any of the eight bytes of x is a control byte, '"' or '\\'
// (word-at-a-time tests: each is exact about whether some byte matches).
inline bool word_needs_escape(std::uint64_t x) {
  constexpr std::uint64_t k01 = 0x0101010101010101ULL, k80 = 0x8080808080808080ULL;
  const std::uint64_t quote = x ^ (k01 * '"'), backslash = x ^ (k01 * '\\');
  return (((x - k01 * 0x20) & ~x) | ((quote - k01) & ~quote) | ((backslash - k01) & ~backslash)) & k80;
}

// Appends s as a JSON string literal (quotes included). Control characters
// and quotes are escaped; bytes >= 0x80 pass through (the caller supplies
// UTF-8; invalid sequences are the caller's to avoid).
inline void append_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    // Eight bytes at a time past those that need nothing (prompts of
    // thousands of words go through here once per request).
    for (std::uint64_t x; i + 8 <= s.size(); i += 8) {
      std::memcpy(&x, s.data() + i, 8);
      if (word_needs_escape(x)) break;
    }
    if (i >= s.size()) break;
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
  char buf[64];  // one append: keys are short
  if (name.size() + 4 > sizeof buf) {
    if (!first) out += ',';
    out += '"';
    out += name;
    out += "\":";
    return;
  }
  char* p = buf;
  if (!first) *p++ = ',';
  *p++ = '"';
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  *p++ = '"';
  *p++ = ':';
  out.append(buf, static_cast<std::size_t>(p - buf));
}

// Writes a part of a line whose length has a known bound straight into the
// string's buffer (the hot lines: a step, a request's event offsets): the
// string grows once by the bound, literals are copied with their length
// known at compile time, integers by std::to_chars; the string is cut to
// what was written when the writer ends. Nothing else may touch the string
// meanwhile. `max_bytes` must bound what is written (an integer takes at
// most 20 bytes, a fixed() number at most 24 beyond its decimals).
class BoundedWriter {
 public:
  BoundedWriter(std::string& out, std::size_t max_bytes) : out_(out), start_(out.size()) {
    out.resize(start_ + max_bytes);
    p_ = out.data() + start_;
    end_ = out.data() + out.size();
  }
  ~BoundedWriter() { out_.resize(static_cast<std::size_t>(p_ - out_.data())); }
  BoundedWriter(const BoundedWriter&) = delete;
  BoundedWriter& operator=(const BoundedWriter&) = delete;

  template <std::size_t N>
  BoundedWriter& lit(const char (&s)[N]) {
    std::memcpy(p_, s, N - 1);
    p_ += N - 1;
    return *this;
  }
  BoundedWriter& ch(char c) {
    *p_++ = c;
    return *this;
  }
  BoundedWriter& u(std::uint64_t v) {
    p_ = std::to_chars(p_, end_, v).ptr;
    return *this;
  }
  BoundedWriter& i(std::int64_t v) {
    p_ = std::to_chars(p_, end_, v).ptr;
    return *this;
  }
  // Fixed notation; a number too large for it (|v| >= 1e18) in the shortest form.
  BoundedWriter& fixed(double v, int decimals) {
    if (!(v < 1e18 && v > -1e18)) {
      p_ = std::to_chars(p_, end_, v).ptr;
      return *this;
    }
    p_ = std::to_chars(p_, end_, v, std::chars_format::fixed, decimals).ptr;
    return *this;
  }

 private:
  std::string& out_;
  std::size_t start_;
  char* p_;
  char* end_;
};

}  // namespace tokenscope::jsonout
