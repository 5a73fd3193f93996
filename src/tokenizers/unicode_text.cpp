#include "tokenizers/unicode_text.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace tokenscope::tokenizers::unicode {
namespace {

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

std::u16string to_utf16(std::string_view utf8) {
  std::u16string out(utf8.size() + 1, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8WithSub(reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &length,
                       utf8.data(), static_cast<int32_t>(utf8.size()), 0xFFFD, nullptr, &status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("UTF-8 to UTF-16: ") + u_errorName(status));
  out.resize(static_cast<std::size_t>(length));
  return out;
}

std::string to_utf8(const char16_t* data, std::size_t size) {
  std::string out(size * 3 + 1, '\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strToUTF8WithSub(out.data(), static_cast<int32_t>(out.size()), &length,
                     reinterpret_cast<const UChar*>(data), static_cast<int32_t>(size), 0xFFFD, nullptr,
                     &status);
  if (U_FAILURE(status)) throw std::runtime_error(std::string("UTF-16 to UTF-8: ") + u_errorName(status));
  out.resize(static_cast<std::size_t>(length));
  return out;
}

const UNormalizer2* normalizer_for(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      n = unorm2_getNFCInstance(&status);
      break;
    case NormalForm::kNfd:
      n = unorm2_getNFDInstance(&status);
      break;
    case NormalForm::kNfkc:
      n = unorm2_getNFKCInstance(&status);
      break;
    case NormalForm::kNfkd:
      n = unorm2_getNFKDInstance(&status);
      break;
  }
  if (U_FAILURE(status) || n == nullptr)
    throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  return n;
}

}  // namespace

char32_t decode_at(std::string_view s, std::size_t i, std::size_t* length) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const std::size_t n = std::min(sequence_length(b0), s.size() - i);
  *length = n;
  if (n == 1) return b0;
  char32_t cp = b0 & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {
// Length of the valid UTF-8 sequence at s[i], or the length of its maximal
// invalid subpart negated (at least -1).
long valid_sequence_at(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -static_cast<long>(k);
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -static_cast<long>(k);
  }
  return static_cast<long>(need + 1);
}
}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const long n = valid_sequence_at(bytes, i);
    if (n < 0) return false;
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 8);
  std::size_t i = 0;
  while (i < bytes.size()) {
    const long n = valid_sequence_at(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<std::size_t>(n)));
      i += static_cast<std::size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<std::size_t>(-n);
    }
  }
  return out;
}

bool is_whitespace(char32_t cp) {
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool is_numeric(char32_t cp) {
  const auto t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_word_char(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  const auto t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

std::string normalize(std::string_view utf8, NormalForm form) {
  if (is_ascii(utf8)) return std::string(utf8);
  const UNormalizer2* n = normalizer_for(form);
  const std::u16string src = to_utf16(utf8);
  UErrorCode status = U_ZERO_ERROR;
  // Quick check first: most text is already normalized.
  const int32_t span = unorm2_spanQuickCheckYes(n, reinterpret_cast<const UChar*>(src.data()),
                                                static_cast<int32_t>(src.size()), &status);
  if (U_SUCCESS(status) && span == static_cast<int32_t>(src.size())) return std::string(utf8);
  status = U_ZERO_ERROR;
  std::vector<char16_t> dest(src.size() * 4 + 16);
  int32_t length =
      unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                       reinterpret_cast<UChar*>(dest.data()), static_cast<int32_t>(dest.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    dest.resize(static_cast<std::size_t>(length) + 1);
    status = U_ZERO_ERROR;
    length =
        unorm2_normalize(n, reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()),
                         reinterpret_cast<UChar*>(dest.data()), static_cast<int32_t>(dest.size()), &status);
  }
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU normalization: ") + u_errorName(status));
  return to_utf8(dest.data(), static_cast<std::size_t>(length));
}

std::string to_lower(std::string_view utf8) {
  if (is_ascii(utf8)) {
    std::string out(utf8);
    for (auto& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  }
  const std::u16string src = to_utf16(utf8);
  std::vector<char16_t> dest(src.size() * 3 + 16);
  UErrorCode status = U_ZERO_ERROR;
  int32_t length =
      u_strToLower(reinterpret_cast<UChar*>(dest.data()), static_cast<int32_t>(dest.size()),
                   reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), "", &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    dest.resize(static_cast<std::size_t>(length) + 1);
    status = U_ZERO_ERROR;
    length = u_strToLower(reinterpret_cast<UChar*>(dest.data()), static_cast<int32_t>(dest.size()),
                          reinterpret_cast<const UChar*>(src.data()), static_cast<int32_t>(src.size()), "",
                          &status);
  }
  if (U_FAILURE(status)) throw std::runtime_error(std::string("ICU lowercase: ") + u_errorName(status));
  return to_utf8(dest.data(), static_cast<std::size_t>(length));
}

}  // namespace tokenscope::tokenizers::unicode
