#include "tokenizers/builtin.h"

#include <gtest/gtest.h>

#include "core/random.h"
#include "tokenizers/prompt_words.h"

namespace tokenscope::tokenizers {
namespace {

TEST(Tokenizer, PiecesFollowTheDocumentedRules) {
  const auto t = tokenize("Hello world, 42 times!");
  // "Hell" "o" " worl" "d" "," " " "4" "2" " time" "s" "!"
  EXPECT_EQ(t.size(), 11u);
  EXPECT_EQ(piece_text(t[2]), std::optional<std::string>(" worl"));
  EXPECT_EQ(piece_text(t[3]), std::optional<std::string>("d"));
  EXPECT_FALSE(piece_text(t[0]).has_value());  // mixed case: hashed id
  EXPECT_EQ(t[6], t[6]);
  EXPECT_NE(t[6], t[7]);  // '4' and '2'
  for (auto id : t) EXPECT_LT(id, kVocabSize);
}

TEST(Tokenizer, UnicodeAndInvalidBytesNeverCrashAndCountPerCharacter) {
  EXPECT_EQ(count_tokens("é"), 1u);
  EXPECT_EQ(count_tokens("日本"), 2u);
  EXPECT_EQ(count_tokens(std::string("\xff\xfe", 2)), 2u);
  EXPECT_EQ(count_tokens(std::string("\xe6\x97", 2)), 1u);  // truncated sequence: one shorter piece
  EXPECT_EQ(count_tokens(std::string("\xc3\xe6\x9c\xac", 4)),
            2u);  // a lead without continuation, then a character
  EXPECT_EQ(count_tokens(""), 0u);
}

TEST(Tokenizer, PrefixOfTextGivesPrefixOfTokens) {
  Rng rng(17);
  const std::string alphabet = "abcXYZ  ,.\n09\xc3\xa9\xe6\x97\xa5\x9c";
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const auto len = rng.uniform_int(1, 80);
    for (std::uint64_t i = 0; i < len; ++i) text += alphabet[rng.uniform_int(0, alphabet.size() - 1)];
    const auto full = tokenize(text);
    for (std::size_t cut = 0; cut <= text.size(); ++cut) {
      const auto part = tokenize(std::string_view(text).substr(0, cut));
      ASSERT_LE(part.size(), full.size() + 0);
      // All but the last token of the prefix are tokens of the full text.
      for (std::size_t k = 0; k + 1 < part.size(); ++k) ASSERT_EQ(part[k], full[k]) << text << " cut " << cut;
    }
  }
}

TEST(Tokenizer, SpacedTokensRoundTripThroughText) {
  std::vector<TokenId> ids;
  for (std::uint64_t k = 0; k < 2000; ++k) ids.push_back(spaced_token_from_key(k));
  std::string text;
  for (auto id : ids) text += *piece_text(id);
  EXPECT_EQ(tokenize(text), ids);
  EXPECT_EQ(piece_text(spaced_word_id("the")), std::optional<std::string>(" the"));
}

TEST(Tokenizer, SpacedWordsFromKeysAreTheTextsOfTheirTokens) {
  for (const std::uint64_t key : {0ULL, 7ULL, 0xfedcba9876543210ULL}) {
    for (const auto& [from, to] :
         {std::pair{0u, 0u}, std::pair{0u, 1u}, std::pair{5u, 3u}, std::pair{3u, 700u}}) {
      std::string expected = "x", got = "x";
      for (std::uint32_t i = from; i < to; ++i)
        append_piece_text(spaced_token_from_key(key + i * 0x9e3779b97f4a7c15ULL), expected);
      append_spaced_words_from_keys(key, 0x9e3779b97f4a7c15ULL, from, to, got);
      ASSERT_EQ(got, expected) << key << " [" << from << ", " << to << ")";
    }
  }
}

TEST(Tokenizer, InvertibleIdsRoundTrip) {
  for (TokenId id :
       {0u, 25u, 26u, 701u, 702u, 18277u, 18278u, kLetterPieces - 1, kLetterPieces, kInvertibleIds - 1}) {
    const auto text = piece_text(id);
    ASSERT_TRUE(text) << id;
    const auto back = tokenize(*text);
    ASSERT_EQ(back.size(), 1u) << *text;
    EXPECT_EQ(back[0], id) << *text;
  }
}

}  // namespace
}  // namespace tokenscope::tokenizers
