#include "bench/prompt_text.h"

#include <gtest/gtest.h>

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
  for (const auto& r : requests) {
    std::vector<tokenizers::TokenId> tokens;
    workload::append_prompt_tokens(w, r, tokens);
    ASSERT_EQ(tokens.size(), r.input_tokens);
    std::string expected;
    for (const auto t : tokens) tokenizers::append_piece_text(t, expected);
    EXPECT_EQ(prompt_text(w, r), expected)
        << "source " << static_cast<int>(r.source) << ", " << r.input_tokens << " tokens";
    if (!expected.empty()) {
      EXPECT_NE(expected.front(), ' ');
    }
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
