#include "tokenizers/builtin.h"

#include <gtest/gtest.h>

#include "core/random.h"

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

TEST(Tokenizer, PiecesTextInOnePassIsPieceByPiece) {
  // Ids of every length, spaced or not, and hashed ids (no text: skipped),
  // appended after text already there; then an empty list.
  Rng rng(41);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TokenId> ids;
    const auto n = rng.uniform_int(0, 300);
    for (std::uint64_t i = 0; i < n; ++i)
      ids.push_back(trial % 3 == 0 ? spaced_token_from_key(rng.next_u64())
                    : i % 17 == 5  ? kInvertibleIds + static_cast<TokenId>(rng.uniform_int(0, 1000))
                                   : static_cast<TokenId>(rng.uniform_int(0, kInvertibleIds - 1)));
    std::string expected = "start", got = "start";
    for (const auto id : ids) append_piece_text(id, expected);
    append_pieces_text(ids, got);
    ASSERT_EQ(got, expected) << "trial " << trial;
  }
  for (TokenId id : {0u, 25u, 26u, 701u, 702u, 18277u, 18278u, kLetterPieces - 1, kLetterPieces,
                     kInvertibleIds - 1, kInvertibleIds}) {
    std::string one;
    append_pieces_text(std::vector<TokenId>{id, id}, one);
    EXPECT_EQ(one, piece_text(id) ? *piece_text(id) + *piece_text(id) : "") << id;
  }
  std::string none = "x";
  append_pieces_text({}, none);
  EXPECT_EQ(none, "x");
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
