#include "tokenizers/builtin.h"

#include "core/random.h"

namespace tokenscope::tokenizers {

namespace {
constexpr TokenId kOffsetByLength[5] = {0, 0, 26, 26 + 676, 26 + 676 + 17576};

bool is_letter(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_lower(unsigned char c) {
  return c >= 'a' && c <= 'z';
}
bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;  // a continuation or invalid byte stands alone
}

TokenId piece_id(std::string_view piece) {
  std::string_view letters = piece;
  bool spaced = false;
  if (!letters.empty() && letters.front() == ' ') {
    spaced = true;
    letters.remove_prefix(1);
  }
  bool lower = !letters.empty() && letters.size() <= 4;
  for (unsigned char c : letters) lower &= is_lower(c);
  if (lower) {
    TokenId v = 0;
    for (unsigned char c : letters) v = v * 26 + static_cast<TokenId>(c - 'a');
    const TokenId id = kOffsetByLength[letters.size()] + v;
    return spaced ? kLetterPieces + id : id;
  }
  return kInvertibleIds + static_cast<TokenId>(hash_string64(piece) % kHashedIds);
}
}  // namespace

void tokenize(std::string_view text, std::vector<TokenId>& out, std::vector<std::uint32_t>* piece_ends) {
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  while (i < n) {
    std::size_t len;
    const unsigned char c = at(i);
    if (c == ' ' && i + 1 < n && is_letter(at(i + 1))) {
      len = 1;
      while (i + len < n && len < 5 && is_letter(at(i + len))) ++len;
    } else if (is_letter(c)) {
      len = 0;
      while (i + len < n && len < 4 && is_letter(at(i + len))) ++len;
    } else if (is_digit(c)) {
      len = 1;
    } else {
      // A UTF-8 sequence: the lead byte and the continuation bytes that
      // follow it, up to the length the lead announces. A sequence cut short
      // (by malformed input or by the end of a prefix) is one shorter piece,
      // so cutting a text inside a character changes only the last token.
      const std::size_t expected = utf8_length(c);
      len = 1;
      while (len < expected && i + len < n && (at(i + len) & 0xC0) == 0x80) ++len;
    }
    out.push_back(piece_id(text.substr(i, len)));
    i += len;
    if (piece_ends) piece_ends->push_back(static_cast<std::uint32_t>(i));
  }
}

std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> out;
  tokenize(text, out);
  return out;
}

std::size_t count_tokens(std::string_view text) {
  thread_local std::vector<TokenId> scratch;
  scratch.clear();
  tokenize(text, scratch);
  return scratch.size();
}

bool append_piece_text(TokenId id, std::string& out) {
  if (id >= kInvertibleIds) return false;
  TokenId rest = id;
  if (rest >= kLetterPieces) {
    out.push_back(' ');
    rest -= kLetterPieces;
  }
  std::size_t len = 4;
  while (len > 1 && rest < kOffsetByLength[len]) --len;
  TokenId v = rest - kOffsetByLength[len];
  char letters[4];
  for (std::size_t k = len; k-- > 0;) {
    letters[k] = static_cast<char>('a' + v % 26);
    v /= 26;
  }
  out.append(letters, len);
  return true;
}

std::optional<std::string> piece_text(TokenId id) {
  std::string out;
  if (!append_piece_text(id, out)) return std::nullopt;
  return out;
}

TokenId spaced_word_id(std::string_view lowercase_word) {
  return piece_id(std::string(" ") + std::string(lowercase_word));
}

}  // namespace tokenscope::tokenizers
