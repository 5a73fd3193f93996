#include "workload/workload.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "workload/synthetic.h"

namespace tokenscope::workload {
namespace {

TEST(HashIdTokens, SharedLeadingIdsShareExactlyThatPrefix) {
  Workload w;
  w.hash_pool = {1, 2, 3, 1, 2, 9};
  Request a, b;
  a.source = b.source = PromptSource::kHashIds;
  a.source_begin = 0;
  b.source_begin = 3;
  a.source_count = b.source_count = 3;
  a.input_tokens = 1500;
  b.input_tokens = 1100;
  std::vector<tokenizers::TokenId> ta, tb;
  append_prompt_tokens(w, a, ta);
  append_prompt_tokens(w, b, tb);
  ASSERT_EQ(ta.size(), 1500u);
  ASSERT_EQ(tb.size(), 1100u);
  for (std::size_t i = 0; i < 1024; ++i) ASSERT_EQ(ta[i], tb[i]) << i;
  std::size_t same = 0;
  for (std::size_t i = 1024; i < 1100; ++i) same += ta[i] == tb[i];
  EXPECT_LT(same, 3u);  // different ids: (almost) every token differs
  // Truncation: a 600-token request with id 1 is the first 600 tokens of block 1.
  Request c = a;
  c.input_tokens = 600;
  std::vector<tokenizers::TokenId> tc;
  append_prompt_tokens(w, c, tc);
  EXPECT_TRUE(std::equal(tc.begin(), tc.end(), ta.begin()));
  // The prompt starts with the block's first word, without its space.
  EXPECT_EQ(hash_block_token(1, 0) - tokenizers::kLetterPieces, ta[0]);
  EXPECT_EQ(hash_block_token(1, 1), ta[1]);
  EXPECT_EQ(*tokenizers::piece_text(ta[0]), tokenizers::piece_text(hash_block_token(1, 0))->substr(1));
}

TEST(Synthetic, PrefixGroupsShareTheirPrefixAndSeedsAreIndependent) {
  SyntheticSettings s;
  s.arrival.rate_rps = 10;
  s.num_requests = 200;
  s.input = parse_length_spec("fixed:300", "--input-len", LengthRole::kInput);
  s.output = parse_length_spec("fixed:10", "--output-len", LengthRole::kOutput);
  s.prefix_groups = 2;
  s.prefix_tokens = 100;
  const auto seeds = WorkloadSeeds::from_master(7);
  const auto w = make_synthetic(s, seeds);
  ASSERT_EQ(w.requests.size(), 200u);
  std::vector<tokenizers::TokenId> first[2];
  for (const auto& r : w.requests) {
    std::vector<tokenizers::TokenId> t;
    append_prompt_tokens(w, r, t);
    auto& ref = first[r.source_begin];
    if (ref.empty()) {
      ref = t;
      continue;
    }
    ASSERT_TRUE(std::equal(t.begin(), t.begin() + 100, ref.begin()));
    ASSERT_NE(t[150], ref[150]);
  }
  // Changing the output-length seed leaves arrivals and prompts untouched.
  auto seeds2 = seeds;
  seeds2.output_len = 12345;
  s.output = parse_length_spec("uniform:1:50", "--output-len", LengthRole::kOutput);
  const auto w2 = make_synthetic(s, seeds2);
  const auto w3 = make_synthetic(s, seeds);
  for (std::size_t i = 0; i < 200; ++i) {
    EXPECT_EQ(w2.requests[i].arrival_ns, w.requests[i].arrival_ns);
    EXPECT_EQ(w2.requests[i].source_begin, w.requests[i].source_begin);
  }
  std::size_t diff = 0;
  for (std::size_t i = 0; i < 200; ++i) diff += w2.requests[i].output_tokens != w3.requests[i].output_tokens;
  EXPECT_GT(diff, 150u);
}

TEST(Synthetic, TenantsAndBadSettings) {
  SyntheticSettings s;
  s.num_requests = 1000;
  s.input = parse_length_spec("fixed:3", "--input-len", LengthRole::kInput);
  s.output = parse_length_spec("fixed:3", "--output-len", LengthRole::kOutput);
  s.tenants = 4;
  const auto w = make_synthetic(s, WorkloadSeeds::from_master(1));
  ASSERT_EQ(w.tenants.size(), 4u);
  std::size_t counts[4] = {};
  for (const auto& r : w.requests) ++counts[r.tenant];
  for (auto c : counts) EXPECT_GT(c, 200u);
  s.num_requests = 0;
  EXPECT_THROW(make_synthetic(s, WorkloadSeeds::from_master(1)), UsageError);
}

}  // namespace
}  // namespace tokenscope::workload
