#include "workload/text.h"

#include <gtest/gtest.h>

#include <set>

namespace tokenscope::workload {
namespace {

TEST(GeneratedText, WordsAreSingleTokensThatRoundTrip) {
  for (auto w : generated_words()) {
    ASSERT_LE(w.size(), 4u) << w;
    const auto ids = tokenizers::tokenize(" " + std::string(w));
    ASSERT_EQ(ids.size(), 1u) << w;
    EXPECT_EQ(tokenizers::piece_text(ids[0]), " " + std::string(w));
  }
}

TEST(GeneratedText, StreamsAreDeterministicPerKeyAndVaried) {
  std::string text;
  std::vector<tokenizers::TokenId> ids;
  std::set<tokenizers::TokenId> distinct;
  for (std::uint32_t i = 0; i < 200; ++i) {
    const tokenizers::TokenId t = generated_token(42, i);
    EXPECT_EQ(t, generated_token(42, i));
    ids.push_back(t);
    distinct.insert(t);
    text += *tokenizers::piece_text(t);
  }
  EXPECT_GT(distinct.size(), 80u);
  EXPECT_EQ(tokenizers::tokenize(text), ids);  // generated text re-tokenizes to the same ids
  int same = 0;
  for (std::uint32_t i = 0; i < 200; ++i) same += generated_token(43, i) == ids[i];
  EXPECT_LT(same, 10);
}

}  // namespace
}  // namespace tokenscope::workload
