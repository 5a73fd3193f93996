#include "bench/prompt_text.h"

#include <gtest/gtest.h>

#include <map>

#include "bench/server_prompts.h"
#include "tokenizers/prompt_words.h"
#include "workload/synthetic.h"

namespace tokenscope::bench {
namespace {

TEST(PromptText, RetokenizesToTheWorkloadTokens) {
  workload::Workload w;
  w.hash_pool = {11, 12, 11, 13};
  workload::Request a, b;
  a.source = b.source = workload::PromptSource::kHashIds;
  a.source_begin = 0;
  b.source_begin = 2;
  a.source_count = b.source_count = 2;
  a.input_tokens = 700;
  b.input_tokens = 900;
  for (const auto* r : {&a, &b}) {
    std::vector<tokenizers::TokenId> expected;
    workload::append_prompt_tokens(w, *r, expected);
    EXPECT_EQ(tokenizers::tokenize(prompt_text(w, *r)), expected);
  }
  // Shared leading hash ids give a shared leading text.
  const std::string ta = prompt_text(w, a), tb = prompt_text(w, b);
  std::size_t common = 0;
  while (common < ta.size() && common < tb.size() && ta[common] == tb[common]) ++common;
  const auto shared_tokens = tokenizers::tokenize(ta.substr(0, common)).size();
  EXPECT_GE(shared_tokens, 511u);
  EXPECT_LE(shared_tokens, 513u);
}

TEST(PromptText, IsTheTextOfTheWorkloadTokensForEverySource) {
  // The text is written from the tokens' keys, not from the tokens: it must
  // be, byte for byte, the pieces of append_prompt_tokens' tokens.
  workload::Workload w;
  w.token_seed = 0x1234;
  w.hash_pool = {11, 12, 11, 13};
  w.hash_block_tokens = 64;
  std::vector<workload::Request> requests;
  for (std::uint32_t n : {0u, 1u, 2u, 63u, 64u, 65u, 300u}) {
    workload::Request r;
    r.id = 1000 + n;
    r.input_tokens = n;
    r.source = workload::PromptSource::kUnique;
    requests.push_back(r);
    r.source = workload::PromptSource::kPrefixGroup;
    r.source_begin = 3;
    r.source_count = 40;  // shared tokens, more or fewer than the prompt's
    requests.push_back(r);
    r.source = workload::PromptSource::kHashIds;
    r.source_begin = 1;
    r.source_count = 3;  // 192 tokens of blocks, then a unique tail
    requests.push_back(r);
  }
  workload::Workload no_blocks = w;  // blocks of no tokens: the whole prompt is the unique tail
  no_blocks.hash_block_tokens = 0;
  for (const auto* wl : {&w, &no_blocks})
    for (const auto& r : requests) {
      std::vector<tokenizers::TokenId> tokens;
      workload::append_prompt_tokens(*wl, r, tokens);
      ASSERT_EQ(tokens.size(), r.input_tokens);
      std::string expected;
      for (const auto t : tokens) tokenizers::append_piece_text(t, expected);
      EXPECT_EQ(prompt_text(*wl, r), expected)
          << "source " << static_cast<int>(r.source) << ", " << r.input_tokens << " tokens, blocks of "
          << wl->hash_block_tokens;
      if (!expected.empty()) {
        EXPECT_NE(expected.front(), ' ');
      }
    }
}

// Splits a prompt at its single spaces.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ' ') {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

TEST(PromptText, ExactPromptsAreTheWorkloadWordsLessTheServersSpecials) {
  // A server whose /tokenize said every prompt word is one token, and that
  // a completions prompt gets one token added (BOS): the exact prompt is
  // the workload's text less its last word (at least one word).
  workload::SyntheticSettings s;
  s.num_requests = 40;
  s.input = workload::parse_length_spec("uniform:1:700", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("fixed:5", "--output-len", workload::LengthRole::kOutput);
  s.prefix_groups = 3;
  s.prefix_tokens = 100;
  const auto w = workload::make_synthetic(s, workload::WorkloadSeeds::from_master(5));
  const auto all_words = tokenizers::prompt_words();
  ServerPromptFacts facts;
  facts.available = true;
  facts.words_method = "pieces";
  facts.completion_added = 1;
  facts.one_token.assign(all_words.size(), true);
  const PromptBuilder every(w, nullptr, /*specials_counted=*/true, &facts);
  ASSERT_TRUE(every.exact());
  for (const auto& r : w.requests) {
    auto expected = words_of(prompt_text(w, r));
    ASSERT_EQ(expected.size(), r.input_tokens);
    if (expected.size() > 1) expected.pop_back();
    EXPECT_EQ(words_of(every.text(r)), expected) << r.input_tokens << " tokens";
  }
  workload::Request none;  // no tokens at all: still one word
  none.id = 77;
  const std::string one = every.text(none);
  EXPECT_FALSE(one.empty());
  EXPECT_EQ(words_of(one).size(), 1u);
  // Every third word is not one token there, and only some words are one
  // token at the start of a text: the others stand in for them, the same
  // stand-in everywhere, and the first word is one of those.
  for (std::size_t i = 0; i < facts.one_token.size(); i += 3) facts.one_token[i] = false;
  facts.first_words = {1, 2, 4, 5, 7, 8, 10, 11};
  const PromptBuilder some(w, nullptr, true, &facts);
  std::map<std::string, std::string> stand_in, first_stand_in;
  for (const auto& r : w.requests) {
    const auto plain = words_of(prompt_text(w, r));
    const auto got = words_of(some.text(r));
    ASSERT_EQ(got.size(), std::max<std::size_t>(1, r.input_tokens - 1));
    bool first_ok = false;
    for (const auto f : facts.first_words) first_ok |= got[0] == all_words[f];
    EXPECT_TRUE(first_ok) << got[0];
    const auto [first, fresh_first] = first_stand_in.emplace(plain[0], got[0]);
    EXPECT_EQ(first->second, got[0]) << plain[0];
    for (std::size_t k = 1; k < got.size(); ++k) {
      const auto at = std::lower_bound(all_words.begin(), all_words.end(), plain[k]) - all_words.begin();
      if (facts.one_token[static_cast<std::size_t>(at)]) {
        EXPECT_EQ(got[k], plain[k]);
      } else {
        const auto [it, fresh] = stand_in.emplace(plain[k], got[k]);
        EXPECT_EQ(it->second, got[k]) << plain[k];
        EXPECT_NE(got[k], plain[k]);
      }
    }
  }
  EXPECT_GT(stand_in.size(), 10u);
}

TEST(PromptText, ExactPromptsOfHashIdsAndOfNoMoreTokensThanTheSpecials) {
  // Hash-id prompts (shared blocks, a unique tail) in the exact mode: the
  // workload's words less the server's three added tokens; a prompt of
  // three tokens or fewer is one word.
  workload::Workload w;
  w.token_seed = 9;
  w.hash_pool = {21, 22, 21, 23};
  w.hash_block_tokens = 32;
  for (std::uint32_t n : {1u, 2u, 3u, 4u, 31u, 32u, 33u, 64u, 65u, 200u}) {
    workload::Request r;
    r.id = n;
    r.input_tokens = n;
    r.source = workload::PromptSource::kHashIds;
    r.source_begin = n % 2 ? 0 : 2;
    r.source_count = 2;
    w.requests.push_back(r);
  }
  ServerPromptFacts facts;
  facts.available = true;
  facts.words_method = "pieces";
  facts.completion_added = 3;
  facts.one_token.assign(tokenizers::prompt_words().size(), true);
  const PromptBuilder builder(w, nullptr, /*specials_counted=*/true, &facts);
  for (const auto& r : w.requests) {
    auto expected = words_of(prompt_text(w, r));
    expected.resize(r.input_tokens > 3 ? r.input_tokens - 3 : 1);
    EXPECT_EQ(words_of(builder.text(r)), expected) << r.input_tokens << " tokens";
  }
}

TEST(PromptText, SyntheticPrefixGroupsAndTextPrompts) {
  workload::SyntheticSettings s;
  s.num_requests = 20;
  s.input = workload::parse_length_spec("fixed:200", "--input-len", workload::LengthRole::kInput);
  s.output = workload::parse_length_spec("fixed:5", "--output-len", workload::LengthRole::kOutput);
  s.prefix_groups = 1;
  s.prefix_tokens = 120;
  const auto w = workload::make_synthetic(s, workload::WorkloadSeeds::from_master(2));
  for (const auto& r : w.requests) EXPECT_EQ(tokenizers::tokenize(prompt_text(w, r)).size(), 200u);
  workload::Workload t;
  t.prompts = {"Hello, World!"};
  workload::Request r;
  r.source = workload::PromptSource::kText;
  EXPECT_EQ(prompt_text(t, r), "Hello, World!");
}

}  // namespace
}  // namespace tokenscope::bench
