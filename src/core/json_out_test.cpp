#include "core/json_out.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/random.h"

namespace tokenscope::jsonout {
namespace {

// The escaping rules one byte at a time, as append_string documents them.
std::string reference_literal(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
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
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

TEST(JsonOut, EveryByteAtEveryPlaceOfAWordIsEscapedAsOneByOne) {
  // Each byte value, alone and at each of the first 20 places of clean text
  // (inside the first, the second and the third eight-byte word, and in the
  // tail), and two of them in one word.
  for (int b = 0; b < 256; ++b) {
    for (std::size_t len = 0; len <= 19; ++len) {
      for (std::size_t at = 0; at <= len; ++at) {
        std::string s(len, 'a');
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), static_cast<char>(b));
        std::string out = "x";
        append_string(out, s);
        ASSERT_EQ(out, "x" + reference_literal(s)) << "byte " << b << " at " << at << " of " << s.size();
        if (at + 3 < s.size()) {
          s[at + 3] = '"';
          out.clear();
          append_string(out, s);
          ASSERT_EQ(out, reference_literal(s)) << "byte " << b << " and a quote at " << at;
        }
      }
    }
  }
}

TEST(JsonOut, RandomBytesGiveTheReferenceLiteralAndValidUtf8TextParsesBack) {
  Rng rng(29);
  const std::string alphabet = "abc xyz\"\\\n\t\x01\x1f\x7f\xc3\xa9";
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s;
    const auto n = rng.uniform_int(0, 70);
    for (std::uint64_t i = 0; i < n; ++i)
      s += trial % 2 ? static_cast<char>(rng.uniform_int(0, 255))
                     : alphabet[rng.uniform_int(0, alphabet.size() - 1)];
    std::string out;
    append_string(out, s);
    ASSERT_EQ(out, reference_literal(s));
  }
  // A JSON parser reads the text back.
  const std::string text =
      "prompt \"words\"\\ with\ttabs,\nnewlines, \x01 and caf\xc3\xa9 — long enough for words";
  std::string out;
  append_string(out, text);
  EXPECT_EQ(nlohmann::json::parse(out).get<std::string>(), text);
}

}  // namespace
}  // namespace tokenscope::jsonout
