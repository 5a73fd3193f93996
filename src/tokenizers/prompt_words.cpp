#include "tokenizers/prompt_words.h"

#include <bit>
#include <cstring>

namespace tokenscope::tokenizers {

namespace {

constexpr std::string_view kWords[] = {
#include "tokenizers/prompt_words.inc"
};
constexpr std::size_t kCount = std::size(kWords);

// The spaced id of a lowercase word of 1..4 letters (builtin.cpp's numbering).
constexpr TokenId spaced_id(std::string_view w) {
  constexpr TokenId offset[5] = {0, 0, 26, 26 + 676, 26 + 676 + 17576};
  TokenId v = 0;
  for (char c : w) v = v * 26 + static_cast<TokenId>(c - 'a');
  return kLetterPieces + offset[w.size()] + v;
}

constexpr std::array<TokenId, kCount> make_ids() {
  std::array<TokenId, kCount> ids{};
  for (std::size_t i = 0; i < kCount; ++i) ids[i] = spaced_id(kWords[i]);
  return ids;
}
constexpr std::array<TokenId, kCount> kIds = make_ids();

// " " + each word in the low bytes of a word (byte k is character k), its
// length with the space in the top byte.
constexpr std::array<std::uint64_t, kCount> make_packed() {
  std::array<std::uint64_t, kCount> packed{};
  for (std::size_t i = 0; i < kCount; ++i) {
    std::uint64_t v = ' ';
    for (std::size_t k = 0; k < kWords[i].size(); ++k)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(kWords[i][k])) << (8 * (k + 1));
    packed[i] = v | static_cast<std::uint64_t>(kWords[i].size() + 1) << 56;
  }
  return packed;
}
constexpr std::array<std::uint64_t, kCount> kPacked = make_packed();
static_assert(std::endian::native == std::endian::little, "kPacked holds its characters little-endian");

constexpr bool all_short_lowercase() {
  for (std::string_view w : kWords) {
    if (w.empty() || w.size() > 4) return false;
    for (char c : w)
      if (c < 'a' || c > 'z') return false;
  }
  return true;
}
static_assert(all_short_lowercase(), "prompt words must be 1..4 lowercase letters");

}  // namespace

std::span<const std::string_view> prompt_words() {
  return kWords;
}

TokenId prompt_word_id(std::size_t i) {
  return kIds[i];
}

std::size_t prompt_word_from_key(std::uint64_t key) {
  // Multiply-shift range reduction of the top 32 bits (Lemire): no division.
  return static_cast<std::size_t>(((mix64(key) >> 32) * kCount) >> 32);
}

TokenId spaced_token_from_key(std::uint64_t key) {
  return kIds[prompt_word_from_key(key)];
}

void append_spaced_words_from_keys(std::uint64_t key, std::uint64_t step, std::uint32_t from,
                                   std::uint32_t to, std::string& out) {
  if (from >= to) return;
  const std::size_t at = out.size();
  // Five bytes at most per word; each word is stored as eight, so three
  // more at the end.
  out.resize(at + 5 * static_cast<std::size_t>(to - from) + 3);
  char* p = out.data() + at;
  for (std::uint32_t i = from; i < to; ++i) {
    const std::uint64_t w = kPacked[prompt_word_from_key(key + i * step)];
    std::memcpy(p, &w, sizeof w);
    p += w >> 56;
  }
  out.resize(static_cast<std::size_t>(p - out.data()));
}

}  // namespace tokenscope::tokenizers
