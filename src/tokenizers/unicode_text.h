// UTF-8 and Unicode helpers for the real tokenizers (text_tokenizer.h):
// decoding, repair of invalid UTF-8, character classes as Rust's `char`
// methods define them (Hugging Face tokenizers is written in Rust), and
// Unicode normalization and lowercasing through ICU.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tokenscope::tokenizers::unicode {

// Length of the UTF-8 sequence that starts with byte `lead` in valid UTF-8
// (1 for ASCII and for bytes that cannot start a sequence).
inline std::size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// The code point at s[i] of valid UTF-8; *length receives its byte length.
char32_t decode_at(std::string_view s, std::size_t i, std::size_t* length);
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view bytes);
// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, one per
// maximal invalid subpart (as Rust's String::from_utf8_lossy and WHATWG).
std::string repair_utf8(std::string_view bytes);

// Rust's char::is_whitespace: the Unicode White_Space property.
bool is_whitespace(char32_t cp);
// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t cp);
// A regex `\w` character in Rust's regex crate: Alphabetic, marks, decimal
// digits, connector punctuation, join controls.
bool is_word_char(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid UTF-8 (ICU). ASCII text is returned as is.
std::string normalize(std::string_view utf8, NormalForm form);
// Full Unicode lowercase mapping of valid UTF-8 (ICU, root locale).
std::string to_lower(std::string_view utf8);

}  // namespace tokenscope::tokenizers::unicode
