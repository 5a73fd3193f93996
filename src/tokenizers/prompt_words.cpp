#include "tokenizers/prompt_words.h"

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

TokenId spaced_token_from_key(std::uint64_t key) {
  // Multiply-shift range reduction of the top 32 bits (Lemire): no division.
  return kIds[((mix64(key) >> 32) * kCount) >> 32];
}

}  // namespace tokenscope::tokenizers
