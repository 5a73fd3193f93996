#include "bench/server_prompts.h"

#include <gtest/gtest.h>

namespace tokenscope::bench {
namespace {

const std::vector<std::string> kWords = {"the", "cat", "qzx", "sat"};

TEST(ServerPrompts, WordsThatArePiecesWithTheirSpace) {
  // Byte-level BPE (llama.cpp's pieces as text): "qzx" is two tokens.
  const auto one = words_from_pieces(kWords, {"the", " cat", " q", "zx", " sat"});
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, (std::vector<bool>{true, true, false, true}));
  // A word whose space is a token of its own is not one token either.
  EXPECT_EQ(*words_from_pieces(kWords, {"the", " ", "cat", " qzx", " sat"}),
            (std::vector<bool>{true, false, true, true}));
  // Two words in one piece: neither is one token.
  EXPECT_EQ(*words_from_pieces(kWords, {"the cat", " qzx", " sat"}),
            (std::vector<bool>{false, false, true, true}));
}

TEST(ServerPrompts, ASentencePieceVocabularySpellsTheFirstWordWithASpace) {
  const auto one = words_from_pieces(kWords, {" the", " cat", " qzx", " s", "at"});
  ASSERT_TRUE(one);
  EXPECT_EQ(*one, (std::vector<bool>{true, true, true, false}));
}

TEST(ServerPrompts, PiecesThatDoNotSpellTheTextAreNotRead) {
  EXPECT_FALSE(words_from_pieces(kWords, {"the", " cat"}));
  EXPECT_FALSE(words_from_pieces(kWords, {"<s>", "the", " cat", " qzx", " sat"}));
  EXPECT_FALSE(words_from_pieces(kWords, {"\x01", " cat", " qzx", " sat"}));
}

TEST(ServerPrompts, FactsForRunJson) {
  ServerPromptFacts f;
  f.reason = "/tokenize: HTTP 404";
  EXPECT_EQ(f.to_json()["available"], false);
  EXPECT_EQ(f.to_json()["reason"], "/tokenize: HTTP 404");
  f.available = true;
  f.one_token = {true, false, true};
  f.words_one_token = 2;
  f.words_method = "counts";
  f.completion_added = 1;
  f.chat_added = 12;
  f.chat_method = "/apply-template";
  const auto j = f.to_json();
  EXPECT_EQ(j["prompt_words"], 3);
  EXPECT_EQ(j["prompt_words_one_token"], 2);
  EXPECT_EQ(j["completion_added_tokens"], 1);
  EXPECT_EQ(j["chat_template_tokens"], 12);
  EXPECT_EQ(j["chat_template_method"], "/apply-template");
}

}  // namespace
}  // namespace tokenscope::bench
